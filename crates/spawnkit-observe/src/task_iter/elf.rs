//! The few sections spawnkit needs from the BPF object clang built (ELF64, elf(5)): the
//! program's instructions, its license, the `.BTF` / `.BTF.ext` pair that carries the CO-RE
//! relocations, and the calls the program makes to kernel functions (kfuncs), which are
//! relocations against undefined symbols.

use super::btf::{u16_at, u32_at};

/// Sections of the object, borrowed.
pub(super) struct Object<'a> {
    pub insns: &'a [u8],
    pub license: &'a [u8],
    pub btf: &'a [u8],
    pub btf_ext: &'a [u8],
    /// Calls to kernel functions: (byte offset of the call instruction, function name).
    pub kfunc_calls: Vec<(usize, &'a [u8])>,
}

const SHT_SYMTAB: u32 = 2;
const SHT_RELA: u32 = 4;
const SHT_REL: u32 = 9;
const EM_BPF: u16 = 247;
/// A call instruction's 32-bit immediate.
const R_BPF_64_32: u32 = 10;
/// BPF_JMP | BPF_CALL
const CALL: u8 = 0x85;

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Find `program` (the section holding the program: its `SEC()` name) and the others.
/// The program must be self-contained apart from kfunc calls: its only relocations may be
/// calls to undefined symbols (no maps, no global data, no calls to other BPF functions).
pub(super) fn parse<'a>(obj: &'a [u8], program: &str) -> Result<Object<'a>, String> {
    let bad = |why: &str| format!("bad BPF object: {why}");
    let little = cfg!(target_endian = "little");
    if obj.get(..4) != Some(b"\x7fELF")
        || obj.get(4) != Some(&2)
        || obj.get(5) != Some(if little { &1 } else { &2 })
        || u16_at(obj, 18) != Some(EM_BPF)
    {
        return Err(bad("not a 64-bit BPF ELF object of this byte order"));
    }
    let shoff = u64_at(obj, 40).ok_or_else(|| bad("short header"))? as usize;
    let shentsize = usize::from(u16_at(obj, 58).ok_or_else(|| bad("short header"))?);
    let shnum = usize::from(u16_at(obj, 60).ok_or_else(|| bad("short header"))?);
    let shstrndx = usize::from(u16_at(obj, 62).ok_or_else(|| bad("short header"))?);
    if shentsize < 64 {
        return Err(bad("section header too small"));
    }
    let header = |i: usize| {
        let start = i.checked_mul(shentsize)?.checked_add(shoff)?;
        obj.get(start..start.checked_add(64)?)
    };
    let data = |h: &[u8]| -> Option<&'a [u8]> {
        let (off, size) = (u64_at(h, 24)? as usize, u64_at(h, 32)? as usize);
        obj.get(off..off.checked_add(size)?)
    };
    let names = header(shstrndx).and_then(data).ok_or_else(|| bad("no section names"))?;
    let name_of = |h: &[u8]| -> &'a [u8] { c_string(names, u32_at(h, 0).unwrap_or(u32::MAX)) };

    let (mut insns, mut license, mut btf, mut btf_ext) = (None, None, None, None);
    let mut program_index = None;
    for i in 0..shnum {
        let h = header(i).ok_or_else(|| bad("section header out of range"))?;
        let slot = match name_of(h) {
            n if n == program.as_bytes() => {
                program_index = Some(i as u32);
                &mut insns
            }
            b"license" => &mut license,
            b".BTF" => &mut btf,
            b".BTF.ext" => &mut btf_ext,
            _ => continue,
        };
        *slot = Some(data(h).ok_or_else(|| bad("section out of range"))?);
    }
    let mut kfunc_calls = Vec::new();
    for i in 0..shnum {
        let h = header(i).ok_or_else(|| bad("section header out of range"))?;
        let kind = u32_at(h, 4).unwrap_or(0);
        if (kind != SHT_REL && kind != SHT_RELA) || u32_at(h, 44) != program_index {
            continue;
        }
        if kind == SHT_RELA {
            return Err(bad("RELA relocations are not supported"));
        }
        // The symbol table the relocations refer to, and its string table.
        let symtab = u32_at(h, 40)
            .and_then(|l| header(l as usize))
            .filter(|s| u32_at(s, 4) == Some(SHT_SYMTAB));
        let symtab = symtab.ok_or_else(|| bad("relocations without a symbol table"))?;
        let symbols = data(symtab).ok_or_else(|| bad("symbol table out of range"))?;
        let strings = u32_at(symtab, 40)
            .and_then(|l| header(l as usize))
            .and_then(data)
            .ok_or_else(|| bad("no symbol names"))?;
        let rels = data(h).ok_or_else(|| bad("relocations out of range"))?;
        for rel in rels.chunks_exact(16) {
            let (offset, info) = (u64_at(rel, 0).unwrap_or(0), u64_at(rel, 8).unwrap_or(0));
            let (sym, typ) = ((info >> 32) as usize, info as u32);
            let sym = symbols.get(sym * 24..sym * 24 + 24).ok_or_else(|| bad("bad symbol"))?;
            let defined = u16_at(sym, 6) != Some(0);
            let name = c_string(strings, u32_at(sym, 0).unwrap_or(u32::MAX));
            if typ != R_BPF_64_32 || defined || name.is_empty() {
                return Err(bad("the program has relocations other than kfunc calls"));
            }
            let offset = usize::try_from(offset).map_err(|_| bad("bad relocation offset"))?;
            kfunc_calls.push((offset, name));
        }
    }
    let missing = |what: &str| bad(&format!("no {what} section"));
    let insns: &[u8] = insns.ok_or_else(|| missing(program))?;
    if insns.is_empty() || !insns.len().is_multiple_of(8) {
        return Err(bad("the program section is not whole instructions"));
    }
    // Each relocated place must be a call instruction (BPF_JMP | BPF_CALL) the loader can
    // point at the kernel's function.
    for &(at, _) in &kfunc_calls {
        if at % 8 != 0 || insns.get(at) != Some(&CALL) {
            return Err(bad("a kfunc relocation is not on a call instruction"));
        }
    }
    Ok(Object {
        insns,
        license: license.ok_or_else(|| missing("license"))?,
        btf: btf.ok_or_else(|| missing(".BTF"))?,
        btf_ext: btf_ext.ok_or_else(|| missing(".BTF.ext"))?,
        kfunc_calls,
    })
}

/// The NUL-terminated string at `off` of a string table (empty when out of range).
fn c_string(table: &[u8], off: u32) -> &[u8] {
    let rest = table.get(off as usize..).unwrap_or_default();
    &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
}
