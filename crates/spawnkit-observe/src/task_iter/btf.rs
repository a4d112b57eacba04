//! A reader for BTF, the kernel's type format (Documentation/bpf/btf.rst; include/uapi/linux/
//! btf.h): the program's own (`.BTF` of the object clang built) and the running kernel's
//! (/sys/kernel/btf/vmlinux). Only what CO-RE field relocations need: types by id, names,
//! struct members, arrays, sizes. One pass over the type section builds the id index; the
//! caller sees every type once during that pass (to pick candidates by name).

/// A parsed BTF blob, borrowing the bytes.
pub(super) struct Btf<'a> {
    types: &'a [u8],
    pub names: Names<'a>,
    /// Byte offset in `types` of type id `i` (index 0 is `void` and unused).
    index: Vec<u32>,
}

/// The string section: names by offset.
#[derive(Clone, Copy)]
pub(super) struct Names<'a>(&'a [u8]);

impl<'a> Names<'a> {
    /// The NUL-terminated string at `off` (empty when out of range).
    pub(super) fn get(&self, off: u32) -> &'a [u8] {
        let rest = self.0.get(off as usize..).unwrap_or_default();
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    }

    /// Whether the string at `off` is exactly `name` (no scan past its length).
    pub(super) fn is(&self, off: u32, name: &[u8]) -> bool {
        let off = off as usize;
        // The first byte alone rules out nearly every name, without a memcmp call.
        self.0.get(off) == name.first()
            && self.0.get(off..off + name.len()) == Some(name)
            && self.0.get(off + name.len()) == Some(&0)
    }
}

/// BTF_KIND_* (include/uapi/linux/btf.h).
pub(super) mod kind {
    pub const INT: u8 = 1;
    pub const PTR: u8 = 2;
    pub const ARRAY: u8 = 3;
    pub const STRUCT: u8 = 4;
    pub const UNION: u8 = 5;
    pub const ENUM: u8 = 6;
    pub const FWD: u8 = 7;
    pub const TYPEDEF: u8 = 8;
    pub const VOLATILE: u8 = 9;
    pub const CONST: u8 = 10;
    pub const RESTRICT: u8 = 11;
    pub const FUNC: u8 = 12;
    pub const FUNC_PROTO: u8 = 13;
    pub const VAR: u8 = 14;
    pub const DATASEC: u8 = 15;
    pub const FLOAT: u8 = 16;
    pub const DECL_TAG: u8 = 17;
    pub const TYPE_TAG: u8 = 18;
    pub const ENUM64: u8 = 19;
}

/// One type record: the common `struct btf_type` and the kind-specific bytes after it.
#[derive(Clone, Copy)]
pub(super) struct Type<'a> {
    pub name_off: u32,
    pub kind: u8,
    kind_flag: bool,
    vlen: u16,
    /// `size` for INT, ENUM, STRUCT, UNION, FLOAT, DATASEC; `type` for the others.
    size_or_type: u32,
    extra: &'a [u8],
}

/// A struct or union member.
#[derive(Clone, Copy)]
pub(super) struct Member {
    pub name_off: u32,
    pub type_id: u32,
    pub bit_offset: u32,
    /// 0 unless a bitfield.
    pub bitfield_size: u32,
}

const MAGIC: u16 = 0xeb9f;

pub(super) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

pub(super) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl<'a> Btf<'a> {
    /// Parse `data` (header, type and string sections), calling `visit(id, type, names)` for
    /// every type in id order.
    pub(super) fn parse(
        data: &'a [u8],
        mut visit: impl FnMut(u32, &Type<'a>, &Names<'a>),
    ) -> Result<Btf<'a>, String> {
        let bad = |why: &str| format!("bad BTF: {why}");
        if u16_at(data, 0) != Some(MAGIC) {
            return Err(bad("no BTF magic (or other byte order)"));
        }
        let field = |at| u32_at(data, at).ok_or_else(|| bad("short header"));
        let hdr_len = field(4)? as usize;
        let (type_off, type_len) = (field(8)? as usize, field(12)? as usize);
        let (str_off, str_len) = (field(16)? as usize, field(20)? as usize);
        let section = |off: usize, len: usize| {
            let start = hdr_len.checked_add(off)?;
            data.get(start..start.checked_add(len)?)
        };
        let types = section(type_off, type_len).ok_or_else(|| bad("type section out of range"))?;
        let names =
            Names(section(str_off, str_len).ok_or_else(|| bad("string section out of range"))?);
        let mut index = Vec::with_capacity(type_len / 16 + 1);
        index.push(0);
        let mut at = 0usize;
        while at < types.len() {
            let ty = Type::at(types, at).ok_or_else(|| bad("truncated type"))?;
            let extra = extra_len(ty.kind, ty.vlen)
                .ok_or_else(|| bad(&format!("unknown type kind {}", ty.kind)))?;
            let end = at + 12 + extra;
            let ty =
                Type { extra: types.get(at + 12..end).ok_or_else(|| bad("truncated type"))?, ..ty };
            let id = u32::try_from(index.len()).map_err(|_| bad("too many types"))?;
            index.push(at as u32);
            visit(id, &ty, &names);
            at = end;
        }
        Ok(Btf { types, names, index })
    }

    /// The type with this id (`None` for void or out of range).
    pub(super) fn ty(&self, id: u32) -> Option<Type<'a>> {
        if id == 0 {
            return None;
        }
        let at = *self.index.get(id as usize)? as usize;
        let ty = Type::at(self.types, at)?;
        let extra = extra_len(ty.kind, ty.vlen)?;
        Some(Type { extra: self.types.get(at + 12..at + 12 + extra)?, ..ty })
    }

    /// Follow typedefs and qualifiers (const, volatile, restrict, type tags) to the type they
    /// name: its id and record.
    pub(super) fn resolve(&self, mut id: u32) -> Option<(u32, Type<'a>)> {
        for _ in 0..64 {
            let ty = self.ty(id)?;
            match ty.kind {
                kind::TYPEDEF | kind::VOLATILE | kind::CONST | kind::RESTRICT | kind::TYPE_TAG => {
                    id = ty.size_or_type
                }
                _ => return Some((id, ty)),
            }
        }
        None
    }

    /// The size in bytes of a type (`None` for void, functions, forward declarations).
    pub(super) fn size_of(&self, mut id: u32) -> Option<u64> {
        let mut count: u64 = 1;
        for _ in 0..32 {
            let (_, ty) = self.resolve(id)?;
            let size = match ty.kind {
                kind::INT
                | kind::ENUM
                | kind::ENUM64
                | kind::STRUCT
                | kind::UNION
                | kind::FLOAT => u64::from(ty.size_or_type),
                kind::PTR => 8,
                kind::ARRAY => {
                    let (elem, nelems) = ty.array()?;
                    count = count.checked_mul(u64::from(nelems))?;
                    id = elem;
                    continue;
                }
                _ => return None,
            };
            return count.checked_mul(size);
        }
        None
    }
}

impl<'a> Type<'a> {
    fn at(types: &'a [u8], at: usize) -> Option<Type<'a>> {
        let info = u32_at(types, at + 4)?;
        Some(Type {
            name_off: u32_at(types, at)?,
            kind: ((info >> 24) & 0x1f) as u8,
            kind_flag: info >> 31 != 0,
            vlen: (info & 0xffff) as u16,
            size_or_type: u32_at(types, at + 8)?,
            extra: &[],
        })
    }

    pub(super) fn is_composite(&self) -> bool {
        self.kind == kind::STRUCT || self.kind == kind::UNION
    }

    /// The members of a struct or union (none for other kinds).
    pub(super) fn members(&self) -> impl Iterator<Item = Member> + 'a {
        let (extra, bitfields) = (self.extra, self.kind_flag);
        let n = if self.is_composite() { usize::from(self.vlen) } else { 0 };
        (0..n).filter_map(move |i| {
            let at = i * 12;
            let offset = u32_at(extra, at + 8)?;
            let (bit_offset, bitfield_size) =
                if bitfields { (offset & 0xff_ffff, offset >> 24) } else { (offset, 0) };
            Some(Member {
                name_off: u32_at(extra, at)?,
                type_id: u32_at(extra, at + 4)?,
                bit_offset,
                bitfield_size,
            })
        })
    }

    /// Member number `i` of a struct or union.
    pub(super) fn member(&self, i: usize) -> Option<Member> {
        self.members().nth(i)
    }

    /// An array's element type and element count.
    pub(super) fn array(&self) -> Option<(u32, u32)> {
        if self.kind != kind::ARRAY {
            return None;
        }
        Some((u32_at(self.extra, 0)?, u32_at(self.extra, 8)?))
    }

    /// An INT's encoding: (bit offset, bits). Ints with a bit offset are bitfield encodings.
    pub(super) fn int_bits(&self) -> Option<(u32, u32)> {
        let enc = u32_at(self.extra, 0)?;
        Some(((enc >> 16) & 0xff, enc & 0xff))
    }
}

/// How many bytes follow `struct btf_type` for a kind; `None` for a kind this reader does not
/// know (whose length it cannot skip).
fn extra_len(k: u8, vlen: u16) -> Option<usize> {
    let vlen = usize::from(vlen);
    Some(match k {
        kind::INT | kind::VAR | kind::DECL_TAG => 4,
        kind::PTR
        | kind::FWD
        | kind::TYPEDEF
        | kind::VOLATILE
        | kind::CONST
        | kind::RESTRICT
        | kind::FUNC
        | kind::FLOAT
        | kind::TYPE_TAG => 0,
        kind::ARRAY => 12,
        kind::STRUCT | kind::UNION | kind::DATASEC | kind::ENUM64 => 12 * vlen,
        kind::ENUM | kind::FUNC_PROTO => 8 * vlen,
        _ => return None,
    })
}
