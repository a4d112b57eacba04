//! CO-RE ("compile once, run everywhere") field relocations, resolved against the running
//! kernel's BTF the way libbpf does it (tools/lib/bpf/relo_core.c), for the kinds our program
//! uses: field byte offset, field byte size, field existence, and the kernel's id of a type.
//!
//! clang records, for each instruction that uses a field offset of a type marked
//! `preserve_access_index`, a `struct bpf_core_relo` in `.BTF.ext`: the instruction, the local
//! root type, and an access string such as `0:9:1` (pointer index, then member or array
//! indices through the local types). The same path is looked up by member *name* in the
//! kernel's types of the same name (without any `___flavour` suffix); the instruction's
//! offset (or 0/1 immediate, for existence) is rewritten with what the kernel has. A field the
//! kernel lacks turns its instruction into a call to an invalid helper, which the verifier
//! accepts only when the code is unreachable (guarded by an existence check).

use super::btf::{kind, u16_at, u32_at, Btf};

/// enum bpf_core_relo_kind
const FIELD_BYTE_OFFSET: u32 = 0;
const FIELD_BYTE_SIZE: u32 = 1;
const FIELD_EXISTS: u32 = 2;
const TYPE_ID_TARGET: u32 = 7;

/// libbpf's marker for an unresolved relocation: `call 0xbad2310`.
const POISON_HELPER: i32 = 0xbad2310;

/// One relocation of the program section.
pub(super) struct Relo {
    insn_off: usize,
    type_id: u32,
    access: Vec<u32>,
    kind: u32,
}

/// What a relocation needs from the kernel: structs/unions of this kind and name.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Wanted<'a> {
    pub kind: u8,
    pub name: &'a [u8],
}

/// The relocations `.BTF.ext` holds for section `section`.
pub(super) fn relocations(ext: &[u8], local: &Btf<'_>, section: &str) -> Result<Vec<Relo>, String> {
    let bad = |why: &str| format!("bad .BTF.ext: {why}");
    if u16_at(ext, 0) != Some(0xeb9f) {
        return Err(bad("no magic"));
    }
    let hdr_len = u32_at(ext, 4).ok_or_else(|| bad("short header"))? as usize;
    if hdr_len < 32 {
        return Ok(Vec::new()); // no CO-RE section
    }
    let off = u32_at(ext, 24).ok_or_else(|| bad("short header"))? as usize;
    let len = u32_at(ext, 28).ok_or_else(|| bad("short header"))? as usize;
    let relos = ext.get(hdr_len + off..hdr_len + off + len).ok_or_else(|| bad("out of range"))?;
    if relos.is_empty() {
        return Ok(Vec::new());
    }
    let rec_size = u32_at(relos, 0).ok_or_else(|| bad("no record size"))? as usize;
    if rec_size < 16 {
        return Err(bad("record too small"));
    }
    let mut out = Vec::new();
    let mut at = 4;
    while at < relos.len() {
        let name = u32_at(relos, at).ok_or_else(|| bad("truncated"))?;
        let count = u32_at(relos, at + 4).ok_or_else(|| bad("truncated"))? as usize;
        at += 8;
        let end = count
            .checked_mul(rec_size)
            .and_then(|n| n.checked_add(at))
            .filter(|&end| end <= relos.len())
            .ok_or_else(|| bad("truncated"))?;
        if local.names.get(name) == section.as_bytes() {
            for rec in relos[at..end].chunks_exact(rec_size) {
                let field = |i: usize| u32_at(rec, 4 * i).ok_or_else(|| bad("truncated"));
                let access = local.names.get(field(2)?);
                let access = std::str::from_utf8(access)
                    .ok()
                    .and_then(|s| {
                        s.split(':').map(|n| n.parse().ok()).collect::<Option<Vec<u32>>>()
                    })
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| bad("bad access string"))?;
                out.push(Relo {
                    insn_off: field(0)? as usize,
                    type_id: field(1)?,
                    access,
                    kind: field(3)?,
                });
            }
        }
        at = end;
    }
    Ok(out)
}

/// The kernel types each relocation's root must be matched against, one entry per distinct
/// (kind, name).
pub(super) fn wanted<'a>(relos: &[Relo], local: &Btf<'a>) -> Result<Vec<Wanted<'a>>, String> {
    let mut out: Vec<Wanted<'a>> = Vec::new();
    for r in relos {
        let w = root(local, r.type_id)?;
        if !out.contains(&w) {
            out.push(w);
        }
    }
    Ok(out)
}

fn root<'a>(local: &Btf<'a>, type_id: u32) -> Result<Wanted<'a>, String> {
    let (_, ty) = local.resolve(type_id).ok_or("CO-RE relocation on an unknown type")?;
    if !ty.is_composite() {
        return Err("CO-RE field relocation on a type that is not a struct or union".into());
    }
    let name = essential(local.names.get(ty.name_off));
    if name.is_empty() {
        // As libbpf: an anonymous type has no name to look for in the kernel's.
        return Err("CO-RE relocation on an anonymous type is not supported".into());
    }
    Ok(Wanted { kind: ty.kind, name })
}

/// A name without its `___flavour` suffix (libbpf's bpf_core_essential_name_len).
fn essential(name: &[u8]) -> &[u8] {
    let n = name.len();
    if n >= 5 {
        for i in (0..=n - 5).rev() {
            if name[i] != b'_' && &name[i + 1..i + 4] == b"___" && name[i + 4] != b'_' {
                return &name[..i + 1];
            }
        }
    }
    name
}

/// One step of an access path, after the root.
enum Step<'a> {
    Member { name: &'a [u8], local_type: u32 },
    Index(u32),
}

/// The local side of a relocation: the named steps, and the offset and size of the field in
/// the program's own types (which the instruction must hold before patching).
struct Local<'a> {
    steps: Vec<Step<'a>>,
    offset: u64,
    size: u64,
    scalar: bool,
}

fn local_spec<'a>(btf: &Btf<'a>, r: &Relo) -> Result<Local<'a>, String> {
    let bad = |why: &str| format!("CO-RE access {:?}: {why}", r.access);
    let (root_id, _) = btf.resolve(r.type_id).ok_or_else(|| bad("unknown root type"))?;
    let root_size = btf.size_of(root_id).ok_or_else(|| bad("root type has no size"))?;
    let too_far = || bad("offset overflows");
    let mut offset = u64::from(r.access[0]).checked_mul(root_size).ok_or_else(too_far)?;
    let mut cur = root_id;
    let mut steps = Vec::new();
    for &i in &r.access[1..] {
        let (_, ty) = btf.resolve(cur).ok_or_else(|| bad("unknown type"))?;
        if ty.is_composite() {
            let m = ty.member(i as usize).ok_or_else(|| bad("no such member"))?;
            if m.bitfield_size != 0 || m.bit_offset % 8 != 0 {
                return Err(bad("bitfields are not supported"));
            }
            offset = offset.checked_add(u64::from(m.bit_offset / 8)).ok_or_else(too_far)?;
            let name = btf.names.get(m.name_off);
            if !name.is_empty() {
                steps.push(Step::Member { name, local_type: m.type_id });
            }
            cur = m.type_id;
        } else if let Some((elem, _)) = ty.array() {
            let size = btf.size_of(elem).ok_or_else(|| bad("element has no size"))?;
            let step = u64::from(i).checked_mul(size).ok_or_else(too_far)?;
            offset = offset.checked_add(step).ok_or_else(too_far)?;
            steps.push(Step::Index(i));
            cur = elem;
        } else {
            return Err(bad("path goes through a type that is neither struct nor array"));
        }
    }
    let (_, last) = btf.resolve(cur).ok_or_else(|| bad("unknown field type"))?;
    Ok(Local {
        steps,
        offset,
        size: btf.size_of(cur).unwrap_or(0),
        scalar: !last.is_composite() && last.kind != kind::ARRAY,
    })
}

/// Where the path leads in the kernel's types, from candidate root `root`: (byte offset,
/// field size), or `None` when the kernel's type has no such field (or an incompatible one).
fn target_spec(
    local: &Btf<'_>,
    target: &Btf<'_>,
    first: u32,
    spec: &Local<'_>,
    root: u32,
) -> Option<(u64, u64)> {
    let mut offset = u64::from(first).checked_mul(target.size_of(root)?)?;
    let mut cur = root;
    for step in &spec.steps {
        let (_, ty) = target.resolve(cur)?;
        match *step {
            Step::Member { name, local_type } => {
                let (m_type, bit_offset) = find_member(target, cur, name, 0)?;
                if bit_offset % 8 != 0 || !compatible(local, local_type, target, m_type) {
                    return None;
                }
                offset = offset.checked_add(u64::from(bit_offset / 8))?;
                cur = m_type;
            }
            Step::Index(i) => {
                let (elem, n) = ty.array()?;
                if i >= n {
                    return None;
                }
                offset = offset.checked_add(u64::from(i).checked_mul(target.size_of(elem)?)?)?;
                cur = elem;
            }
        }
    }
    Some((offset, target.size_of(cur).unwrap_or(0)))
}

/// Member `name` of struct/union `id`, looking through anonymous struct/union members:
/// (its type, its bit offset from the start of `id`). Bitfields do not match.
fn find_member(btf: &Btf<'_>, id: u32, name: &[u8], depth: u32) -> Option<(u32, u32)> {
    let (_, ty) = btf.resolve(id)?;
    if depth > 16 || !ty.is_composite() {
        return None;
    }
    for m in ty.members() {
        if m.name_off == 0 || btf.names.get(m.name_off).is_empty() {
            if let Some((t, off)) = find_member(btf, m.type_id, name, depth + 1) {
                return Some((t, m.bit_offset.checked_add(off)?));
            }
        } else if btf.names.is(m.name_off, name) {
            return (m.bitfield_size == 0).then_some((m.type_id, m.bit_offset));
        }
    }
    None
}

/// libbpf's bpf_core_fields_are_compat: may a field of local type `l` be read as the kernel's
/// field of type `t`?
fn compatible(local: &Btf<'_>, mut l: u32, target: &Btf<'_>, mut t: u32) -> bool {
    for _ in 0..16 {
        let (Some((_, lt)), Some((_, tt))) = (local.resolve(l), target.resolve(t)) else {
            return false;
        };
        if lt.is_composite() && tt.is_composite() {
            return true;
        }
        let enums = |k| k == kind::ENUM || k == kind::ENUM64;
        if lt.kind != tt.kind && !(enums(lt.kind) && enums(tt.kind)) {
            return false;
        }
        match lt.kind {
            kind::PTR | kind::FLOAT => return true,
            kind::FWD | kind::ENUM | kind::ENUM64 => {
                return essential(local.names.get(lt.name_off)) == target.names.get(tt.name_off)
            }
            kind::INT => {
                return lt.int_bits().is_some_and(|(o, _)| o == 0)
                    && tt.int_bits().is_some_and(|(o, _)| o == 0)
            }
            kind::ARRAY => match (lt.array(), tt.array()) {
                (Some((le, _)), Some((te, _))) => (l, t) = (le, te),
                _ => return false,
            },
            _ => return false,
        }
    }
    false
}

/// Resolve every relocation against the kernel's BTF and patch `insns` in place.
/// `candidates[i]` holds the kernel type ids matching `wanted[i]`.
pub(super) fn apply(
    insns: &mut [u8],
    relos: &[Relo],
    local: &Btf<'_>,
    target: &Btf<'_>,
    wanted: &[Wanted<'_>],
    candidates: &[Vec<u32>],
) -> Result<(), String> {
    for r in relos {
        let w = root(local, r.type_id)?;
        let cands = wanted.iter().position(|x| *x == w).and_then(|i| candidates.get(i));
        if r.kind == TYPE_ID_TARGET {
            let name = String::from_utf8_lossy(w.name);
            let id = match cands.map(Vec::as_slice).unwrap_or_default() {
                [id] => *id,
                [] => return Err(format!("CO-RE: the kernel has no type {name}")),
                _ => return Err(format!("CO-RE: the kernel has several types named {name}")),
            };
            patch(insns, r.insn_off, u64::from(r.type_id), u64::from(id))
                .map_err(|e| format!("CO-RE type id: {e}"))?;
            continue;
        }
        let spec = local_spec(local, r)?;
        let mut found: Option<(u64, u64)> = None;
        for &c in cands.into_iter().flatten() {
            if let Some(hit) = target_spec(local, target, r.access[0], &spec, c) {
                if found.is_some_and(|f| f != hit) {
                    return Err(format!(
                        "CO-RE: kernel types named {} disagree",
                        String::from_utf8_lossy(w.name)
                    ));
                }
                found = Some(hit);
            }
        }
        let what = || format!("{}{:?}", String::from_utf8_lossy(w.name), r.access);
        let (old, new) = match (r.kind, found) {
            (FIELD_EXISTS, f) => (1, u64::from(f.is_some())),
            (FIELD_BYTE_OFFSET | FIELD_BYTE_SIZE, None) => {
                poison(insns, r.insn_off)?;
                continue;
            }
            (FIELD_BYTE_OFFSET, Some((off, size))) => {
                if spec.scalar && size != spec.size {
                    return Err(format!(
                        "CO-RE: field {} is {size} bytes in this kernel, {} in the program",
                        what(),
                        spec.size
                    ));
                }
                (spec.offset, off)
            }
            (FIELD_BYTE_SIZE, Some((_, size))) => (spec.size, size),
            (k, _) => return Err(format!("CO-RE relocation kind {k} is not supported")),
        };
        patch(insns, r.insn_off, old, new).map_err(|e| format!("CO-RE {}: {e}", what()))?;
    }
    Ok(())
}

/// Rewrite the instruction at byte `at`: its immediate (ALU with a constant, 64-bit load of
/// an immediate) or its offset (loads and stores), which must hold `old` (what clang computed
/// from the program's own types).
fn patch(insns: &mut [u8], at: usize, old: u64, new: u64) -> Result<(), String> {
    const LD: u8 = 0x00;
    const LDX: u8 = 0x01;
    const ST: u8 = 0x02;
    const STX: u8 = 0x03;
    const ALU: u8 = 0x04;
    const ALU64: u8 = 0x07;
    const SRC_X: u8 = 0x08;
    const LD_IMM64: u8 = 0x18;
    if !at.is_multiple_of(8) || at + 8 > insns.len() {
        return Err("instruction out of range".into());
    }
    let code = insns[at];
    let class = code & 0x07;
    match class {
        ALU | ALU64 if code & SRC_X == 0 => {
            let imm = i32::from_ne_bytes(insns[at + 4..at + 8].try_into().map_err(|_| "short")?);
            if imm as i64 as u64 != old {
                return Err(format!("instruction holds {imm}, expected {old}"));
            }
            let new = i32::try_from(new).map_err(|_| "value does not fit")?;
            insns[at + 4..at + 8].copy_from_slice(&new.to_ne_bytes());
        }
        LDX | ST | STX => {
            let off = i16::from_ne_bytes(insns[at + 2..at + 4].try_into().map_err(|_| "short")?);
            if off as i64 as u64 != old {
                return Err(format!("instruction holds offset {off}, expected {old}"));
            }
            let new = i16::try_from(new).map_err(|_| "offset does not fit")?;
            insns[at + 2..at + 4].copy_from_slice(&new.to_ne_bytes());
        }
        LD if code == LD_IMM64 && insns.len() >= at + 16 => {
            let lo = u32::from_ne_bytes(insns[at + 4..at + 8].try_into().map_err(|_| "short")?);
            let hi = u32::from_ne_bytes(insns[at + 12..at + 16].try_into().map_err(|_| "short")?);
            if (u64::from(hi) << 32 | u64::from(lo)) != old {
                return Err(format!("instruction holds {lo}, expected {old}"));
            }
            insns[at + 4..at + 8].copy_from_slice(&(new as u32).to_ne_bytes());
            insns[at + 12..at + 16].copy_from_slice(&((new >> 32) as u32).to_ne_bytes());
        }
        _ => return Err(format!("cannot relocate instruction code {code:#x}")),
    }
    Ok(())
}

/// Make the instruction at byte `at` a call to a helper that does not exist.
fn poison(insns: &mut [u8], at: usize) -> Result<(), String> {
    let insn = insns
        .get_mut(at..at + 8)
        .filter(|_| at.is_multiple_of(8))
        .ok_or("instruction out of range")?;
    if insn[0] == 0x18 {
        return Err("cannot poison a 64-bit immediate load".into());
    }
    insn[0] = 0x85; // BPF_JMP | BPF_CALL
    insn[1] = 0;
    insn[2..4].copy_from_slice(&0i16.to_ne_bytes());
    insn[4..8].copy_from_slice(&POISON_HELPER.to_ne_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavours_are_cut_like_libbpf() {
        assert_eq!(essential(b"task_struct___old"), b"task_struct");
        assert_eq!(essential(b"mm_rss_stat___old"), b"mm_rss_stat");
        assert_eq!(essential(b"task_struct"), b"task_struct");
        assert_eq!(essential(b"bpf_iter__task"), b"bpf_iter__task");
        assert_eq!(essential(b"a____b"), b"a____b"); // four underscores: not a flavour
        assert_eq!(essential(b""), b"");
    }

    /// A BTF blob: a string section of `names` (offset of `names[i]`: `name(i)`), and
    /// `types` as (name offset, kind, vlen, size or type, the words after the type).
    fn blob(names: &[&str], types: &[(u32, u8, u16, u32, &[u32])]) -> Vec<u8> {
        let mut strings = vec![0u8];
        for n in names {
            strings.extend_from_slice(n.as_bytes());
            strings.push(0);
        }
        let mut t = Vec::new();
        for &(n, k, vlen, size, extra) in types {
            for w in [n, (u32::from(k) << 24) | u32::from(vlen), size].iter().chain(extra) {
                t.extend_from_slice(&w.to_ne_bytes());
            }
        }
        let mut b = Vec::new();
        b.extend_from_slice(&0xeb9fu16.to_ne_bytes());
        b.extend_from_slice(&[1, 0]);
        for w in [24, 0, t.len() as u32, t.len() as u32, strings.len() as u32] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b.extend(t);
        b.extend(strings);
        b
    }

    #[test]
    fn relocations_it_cannot_resolve_are_refused_not_guessed() {
        // Names: "int" at 1, "s" at 5, "a" at 7.
        let (int, s, a) = (1, 5, 7);
        // [1] int; [2] struct s { int a; }; [3] an anonymous struct { int a; }.
        let b = blob(
            &["int", "s", "a"],
            &[
                (int, kind::INT, 0, 4, &[32]),
                (s, kind::STRUCT, 1, 4, &[a, 1, 0]),
                (0, kind::STRUCT, 1, 4, &[a, 1, 0]),
            ],
        );
        let btf = Btf::parse(&b, |_, _, _| {}).unwrap();
        assert_eq!(btf.names.get(a), b"a");
        let relo = |type_id, kind| Relo { insn_off: 0, type_id, access: vec![0, 0], kind };
        let mut insns = insn(0x61, 0, 0); // r0 = *(u32 *)(r0 + 0)
        let w = wanted(&[relo(2, FIELD_BYTE_OFFSET)], &btf).unwrap();
        let cands = vec![vec![2]];

        // The offset of s.a (0 here too) is patched.
        apply(&mut insns, &[relo(2, FIELD_BYTE_OFFSET)], &btf, &btf, &w, &cands).unwrap();
        // Kinds other than field offset/size/existence and target type id: an error.
        for k in [3, 4, 5, 6, 8, 9, 10, 11, 12] {
            let e = apply(&mut insns, &[relo(2, k)], &btf, &btf, &w, &cands).unwrap_err();
            assert!(e.contains(&format!("kind {k} is not supported")), "{k}: {e}");
        }
        // The kernel's id of a type: one candidate, or an error.
        let mut ld = insn(0x18, 0, 2);
        ld.extend(insn(0, 0, 0));
        let type_id = Relo { insn_off: 0, type_id: 2, access: vec![0], kind: TYPE_ID_TARGET };
        let types = std::slice::from_ref(&type_id);
        apply(&mut ld, types, &btf, &btf, &w, &[vec![2]]).unwrap();
        let e = apply(&mut ld, types, &btf, &btf, &w, &[vec![2, 3]]).unwrap_err();
        assert!(e.contains("several types named s"), "{e}");
        assert!(apply(&mut ld, types, &btf, &btf, &w, &[vec![]]).is_err());
        // An anonymous root type has no name to find in the kernel's BTF.
        let e = wanted(&[relo(3, FIELD_BYTE_OFFSET)], &btf).err().unwrap();
        assert!(e.contains("anonymous"), "{e}");
        // A root that is not a struct or union.
        assert!(wanted(&[relo(1, FIELD_BYTE_OFFSET)], &btf).is_err());
    }

    fn insn(code: u8, off: i16, imm: i32) -> Vec<u8> {
        let mut i = vec![code, 0];
        i.extend_from_slice(&off.to_ne_bytes());
        i.extend_from_slice(&imm.to_ne_bytes());
        i
    }

    #[test]
    fn patches_offsets_immediates_and_poisons() {
        // r1 = *(u32 *)(r7 + 16)  ->  + 2856
        let mut ldx = insn(0x61, 16, 0);
        patch(&mut ldx, 0, 16, 2856).unwrap();
        assert_eq!(ldx, insn(0x61, 2856, 0));
        // An offset that does not fit an instruction's 16 bits.
        assert!(patch(&mut insn(0x61, 16, 0), 0, 16, 40000).is_err());
        // r2 = 8 (mov imm)  ->  48
        let mut mov = insn(0xb7, 0, 8);
        patch(&mut mov, 0, 8, 48).unwrap();
        assert_eq!(mov, insn(0xb7, 0, 48));
        // The instruction must hold what clang computed from the local types.
        assert!(patch(&mut insn(0xb7, 0, 9), 0, 8, 48).is_err());
        // Not relocatable: a call; out of range.
        assert!(patch(&mut insn(0x85, 0, 14), 0, 14, 1).is_err());
        assert!(patch(&mut insn(0x61, 16, 0), 8, 16, 1).is_err());
        // r2 = 13 ll (two slots)  ->  a kernel type id
        let mut ld = insn(0x18, 0, 13);
        ld.extend(insn(0, 0, 0));
        patch(&mut ld, 0, 13, 130_000).unwrap();
        assert_eq!(&ld[4..8], &130_000u32.to_ne_bytes());
        let mut p = insn(0x61, 16, 0);
        poison(&mut p, 0).unwrap();
        assert_eq!(p, insn(0x85, 0, POISON_HELPER));
    }
}
