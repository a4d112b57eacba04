//! Option values with a syntax and a range of their own: CPU lists, the umask, rlimits.
//!
//! Each has one parser ([`FromStr`]) and one printer ([`Display`]) for every face (the
//! command line, Python, the plan's listing), and one range check that the parser and the
//! plan both call.

use std::fmt::{self, Display};
use std::str::FromStr;

use super::options::{Resource, RLIM_INFINITY};

/// Why a string is not an option's value; the message names the value and says what was
/// expected (`"x" is not a CPU number`). The command line prints it after the flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseValueError(String);

impl ParseValueError {
    /// An error with this message (public so that spawnkit's sibling crates report their
    /// option values, such as a process-table backend, with the same type).
    pub fn new(message: impl Into<String>) -> ParseValueError {
        ParseValueError(message.into())
    }
}

impl Display for ParseValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseValueError {}

// ---------------------------------------------------------------------------------------
// CPU lists.
// ---------------------------------------------------------------------------------------

/// A set of CPUs for [`Command::cpu_affinity`](crate::Command::cpu_affinity), written as
/// taskset(1) and cpuset do: `0,2`, ranges `0-3`, combined `0-3,8,10-11`.
///
/// The parser and [`CpuList::new`] give the CPUs sorted, without duplicates, at least one,
/// each checked by [`CpuList::check_cpu`]; the plan checks a command's CPUs through
/// [`CpuList::new`] too, however they were given. The field is public so a face can take the
/// numbers out.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CpuList(pub Vec<usize>);

impl CpuList {
    /// The highest CPU number the kernel interface takes here (a mask of 8192 CPUs, the
    /// kernel's largest `NR_CPUS`).
    pub const MAX_CPU: usize = 8191;

    /// `cpu`, if sched_setaffinity(2) can name it: the one range check of a CPU number.
    pub fn check_cpu(cpu: usize) -> Result<usize, ParseValueError> {
        if cpu > CpuList::MAX_CPU {
            return Err(ParseValueError(format!(
                "CPU {cpu} is out of range (0..={})",
                CpuList::MAX_CPU
            )));
        }
        Ok(cpu)
    }

    /// The list of `cpus`, sorted and without duplicates; empty, or a CPU out of range
    /// ([`CpuList::check_cpu`]), is an error.
    pub fn new(cpus: impl IntoIterator<Item = usize>) -> Result<CpuList, ParseValueError> {
        let mut list =
            cpus.into_iter().map(CpuList::check_cpu).collect::<Result<Vec<usize>, _>>()?;
        if list.is_empty() {
            return Err(ParseValueError::new("empty CPU list"));
        }
        list.sort_unstable();
        list.dedup();
        Ok(CpuList(list))
    }

    /// The kernel's affinity mask: bit `c % 64` of word `c / 64` for each CPU `c`.
    pub fn mask(&self) -> Vec<u64> {
        let max = self.0.iter().copied().max().unwrap_or(0);
        let mut mask = vec![0u64; max / 64 + 1];
        for &c in &self.0 {
            mask[c / 64] |= 1u64 << (c % 64);
        }
        mask
    }
}

impl FromStr for CpuList {
    type Err = ParseValueError;
    /// `0,2`, `0-3`, `8,0-2,1` (blanks around numbers are allowed); a range's ends are
    /// checked before it is expanded.
    fn from_str(s: &str) -> Result<CpuList, ParseValueError> {
        let number = |t: &str| -> Result<usize, ParseValueError> {
            let n = t
                .trim()
                .parse::<usize>()
                .map_err(|_| ParseValueError(format!("{t:?} is not a CPU number")))?;
            CpuList::check_cpu(n)
        };
        if s.trim().is_empty() {
            return Err(ParseValueError::new("empty CPU list"));
        }
        let mut cpus = Vec::new();
        for part in s.split(',') {
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (number(a)?, number(b)?);
                    if a > b {
                        return Err(ParseValueError(format!("the range {part:?} is reversed")));
                    }
                    cpus.extend(a..=b);
                }
                None => cpus.push(number(part)?),
            }
        }
        CpuList::new(cpus)
    }
}

impl Display for CpuList {
    /// Runs of consecutive CPUs as ranges: `0-3,8,10-11`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0.as_slice();
        let mut sep = "";
        while let Some((&first, _)) = rest.split_first() {
            let mut run = 1;
            while run < rest.len() && rest[run - 1].checked_add(1) == Some(rest[run]) {
                run += 1;
            }
            let last = rest[run - 1];
            if first == last {
                write!(f, "{sep}{first}")?;
            } else {
                write!(f, "{sep}{first}-{last}")?;
            }
            rest = &rest[run..];
            sep = ",";
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The umask.
// ---------------------------------------------------------------------------------------

/// A umask: permission bits, 0 to 0777, written in octal (`077`, `0027`, `0o22`) and printed
/// with four digits (`0027`), as umask(1) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Umask(u32);

impl Umask {
    /// The largest umask: every permission bit.
    pub const MAX: u32 = 0o777;

    /// The umask of these bits, if they are permission bits only (0..=0777): the one range
    /// check of a umask, made by the parser and by the plan.
    pub fn new(bits: u32) -> Option<Umask> {
        (bits <= Umask::MAX).then_some(Umask(bits))
    }

    /// The bits, for [`Command::umask`](crate::Command::umask).
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl FromStr for Umask {
    type Err = ParseValueError;
    fn from_str(s: &str) -> Result<Umask, ParseValueError> {
        let digits = s.strip_prefix("0o").unwrap_or(s);
        if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return Err(ParseValueError(format!("{s:?} is not an octal mode (like 022 or 077)")));
        }
        u32::from_str_radix(digits, 8)
            .ok()
            .and_then(Umask::new)
            .ok_or_else(|| ParseValueError(format!("{s:?} is out of range (000..=777)")))
    }
}

impl Display for Umask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

impl From<Umask> for u32 {
    fn from(mask: Umask) -> u32 {
        mask.0
    }
}

// ---------------------------------------------------------------------------------------
// Resource limits.
// ---------------------------------------------------------------------------------------

/// One resource limit value: a number, or [`RLIM_INFINITY`], written `unlimited` (the
/// parser takes `infinity` too, in any case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Limit(pub u64);

impl Limit {
    /// No limit.
    pub const UNLIMITED: Limit = Limit(RLIM_INFINITY);
}

impl FromStr for Limit {
    type Err = ParseValueError;
    fn from_str(s: &str) -> Result<Limit, ParseValueError> {
        if s.eq_ignore_ascii_case("unlimited") || s.eq_ignore_ascii_case("infinity") {
            return Ok(Limit::UNLIMITED);
        }
        s.parse::<u64>().map(Limit).map_err(|_| {
            ParseValueError(format!("{s:?} is not a limit (a number, 'unlimited' or 'infinity')"))
        })
    }
}

impl Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Limit::UNLIMITED {
            f.write_str("unlimited")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// A resource limit to set, `NAME=SOFT[:HARD]` (`nofile=1024:4096`; with only SOFT, the
/// hard limit is the same), as [`Command::rlimit`](crate::Command::rlimit) takes it.
/// Printed `NOFILE=1024:4096`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rlimit {
    resource: Resource,
    soft: u64,
    hard: u64,
}

impl Rlimit {
    /// The limit, if `soft` is not above `hard`. (A [`Command`](crate::Command) given such a
    /// pair anyway fails as setrlimit(2) does, with EINVAL from the child.)
    pub fn new(resource: Resource, soft: u64, hard: u64) -> Result<Rlimit, ParseValueError> {
        if soft > hard {
            return Err(ParseValueError(format!(
                "the soft limit {soft} is above the hard limit {hard}"
            )));
        }
        Ok(Rlimit { resource, soft, hard })
    }

    pub fn resource(self) -> Resource {
        self.resource
    }

    pub fn soft(self) -> u64 {
        self.soft
    }

    pub fn hard(self) -> u64 {
        self.hard
    }
}

impl From<Rlimit> for (Resource, u64, u64) {
    fn from(r: Rlimit) -> (Resource, u64, u64) {
        (r.resource, r.soft, r.hard)
    }
}

impl FromStr for Rlimit {
    type Err = ParseValueError;
    /// NAME as [`Resource`]'s parser takes it (`nofile`, `NOFILE`, `RLIMIT_NOFILE`), values as
    /// [`Limit`]'s.
    fn from_str(spec: &str) -> Result<Rlimit, ParseValueError> {
        let (name, values) = spec.split_once('=').ok_or_else(|| {
            ParseValueError::new("expected NAME=SOFT[:HARD], for example nofile=1024:4096")
        })?;
        let resource: Resource = name.parse().map_err(|_| {
            let known: Vec<String> =
                Resource::ALL.iter().map(|r| r.name().to_ascii_lowercase()).collect();
            ParseValueError(format!("unknown resource {name:?} (known: {})", known.join(", ")))
        })?;
        let (Limit(soft), Limit(hard)) = match values.split_once(':') {
            Some((soft, hard)) => (soft.parse()?, hard.parse()?),
            None => {
                let v = values.parse()?;
                (v, v)
            }
        };
        Rlimit::new(resource, soft, hard)
    }
}

impl Display for Rlimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}:{}", self.resource, Limit(self.soft), Limit(self.hard))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn err<T: fmt::Debug>(r: Result<T, ParseValueError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn cpu_lists() {
        let p = |s: &str| s.parse::<CpuList>();
        assert_eq!(p("0"), Ok(CpuList(vec![0])));
        assert_eq!(p("0,1"), Ok(CpuList(vec![0, 1])));
        assert_eq!(p("0-3"), Ok(CpuList(vec![0, 1, 2, 3])));
        assert_eq!(p("8,0-2,1"), Ok(CpuList(vec![0, 1, 2, 8])));
        assert_eq!(p("2-2"), Ok(CpuList(vec![2])));
        assert_eq!(p(" 1 , 3 "), Ok(CpuList(vec![1, 3])));
        assert_eq!(p("8191"), Ok(CpuList(vec![8191])));
        assert_eq!(err(p("")), "empty CPU list");
        assert_eq!(err(p("3-1")), "the range \"3-1\" is reversed");
        assert_eq!(err(p("a")), "\"a\" is not a CPU number");
        assert_eq!(err(p("0,")), "\"\" is not a CPU number");
        assert_eq!(err(p("-1")), "\"\" is not a CPU number");
        assert_eq!(err(p("0-100000000")), "CPU 100000000 is out of range (0..=8191)");
        assert_eq!(err(p("8192")), "CPU 8192 is out of range (0..=8191)");
        assert_eq!(err(CpuList::new([])), "empty CPU list");
        assert_eq!(CpuList::new([3, 1, 3]), Ok(CpuList(vec![1, 3])));
    }

    #[test]
    fn cpu_lists_print_runs_as_ranges() {
        assert_eq!(CpuList(vec![0, 1, 2, 3, 8, 10, 11]).to_string(), "0-3,8,10-11");
        assert_eq!(CpuList(vec![5]).to_string(), "5");
        assert_eq!(CpuList(vec![0, 2]).to_string(), "0,2");
        assert_eq!(CpuList(vec![0, 1]).to_string(), "0-1");
    }

    #[test]
    fn cpu_masks() {
        assert_eq!(CpuList(vec![0, 2]).mask(), vec![0b101]);
        assert_eq!(CpuList(vec![1, 64]).mask(), vec![0b10, 0b1]);
    }

    #[test]
    fn umasks() {
        let p = |s: &str| s.parse::<Umask>().map(Umask::bits);
        assert_eq!(p("077"), Ok(0o77));
        assert_eq!(p("0027"), Ok(0o27));
        assert_eq!(p("22"), Ok(0o22));
        assert_eq!(p("0"), Ok(0));
        assert_eq!(p("777"), Ok(0o777));
        assert_eq!(p("0o022"), Ok(0o22));
        assert_eq!(err(p("8")), "\"8\" is not an octal mode (like 022 or 077)");
        assert!(err(p("")).contains("not an octal mode"));
        assert_eq!(err(p("1000")), "\"1000\" is out of range (000..=777)");
        assert!(err(p("77777777777777777777")).contains("out of range"));
        assert!(err(p("99999999999999999999")).contains("not an octal mode"));
        assert_eq!(Umask::new(0o22).map(|m| m.to_string()), Some("0022".into()));
        assert_eq!(Umask::new(0o1000), None);
    }

    #[test]
    fn limits() {
        assert_eq!("64".parse(), Ok(Limit(64)));
        for s in ["unlimited", "UNLIMITED", "infinity", "Infinity"] {
            assert_eq!(s.parse(), Ok(Limit::UNLIMITED), "{s}");
        }
        assert_eq!(Limit::UNLIMITED.to_string(), "unlimited");
        assert_eq!(Limit(0).to_string(), "0");
        assert_eq!(
            err("x".parse::<Limit>()),
            "\"x\" is not a limit (a number, 'unlimited' or 'infinity')"
        );
        assert!(err("-1".parse::<Limit>()).contains("is not a limit"));
    }

    #[test]
    fn rlimit_specs() {
        let p = |s: &str| s.parse::<Rlimit>().map(<(Resource, u64, u64)>::from);
        assert_eq!(p("nofile=64"), Ok((Resource::Nofile, 64, 64)));
        assert_eq!(p("NOFILE=64:128"), Ok((Resource::Nofile, 64, 128)));
        assert_eq!(p("RLIMIT_CORE=0:unlimited"), Ok((Resource::Core, 0, RLIM_INFINITY)));
        assert_eq!(p("as=infinity"), Ok((Resource::As, RLIM_INFINITY, RLIM_INFINITY)));
        assert_eq!(p("stack=UNLIMITED:Infinity").map(|r| r.1), Ok(RLIM_INFINITY));
        assert!(err(p("bogus=1")).starts_with("unknown resource \"bogus\" (known: cpu, fsize,"));
        assert!(err(p("nofile")).contains("NAME=SOFT[:HARD]"));
        assert!(err(p("nofile=x")).contains("\"x\" is not a limit"));
        assert!(err(p("nofile=1:")).contains("\"\" is not a limit"));
        assert!(p("nofile=-1").is_err());
        assert_eq!(err(p("nofile=10:5")), "the soft limit 10 is above the hard limit 5");
        assert!(p("nofile=unlimited:5").is_err());
        assert_eq!(
            Rlimit::new(Resource::Nofile, 64, RLIM_INFINITY).unwrap().to_string(),
            "NOFILE=64:unlimited"
        );
    }

    #[test]
    fn the_plan_checks_with_the_same_functions() {
        let plan_err = |set: &dyn Fn(&mut crate::Command)| {
            let mut cmd = crate::Command::new("true");
            set(&mut cmd);
            cmd.plan().unwrap_err().to_string()
        };
        assert_eq!(
            plan_err(&|c| {
                c.cpu_affinity([1, CpuList::MAX_CPU + 1]);
            }),
            "sched_setaffinity cpus: CPU 8192 is out of range (0..=8191)"
        );
        assert_eq!(
            plan_err(&|c| {
                c.cpu_affinity([]);
            }),
            "sched_setaffinity cpus: empty CPU list"
        );
        assert_eq!(
            plan_err(&|c| {
                c.umask(Umask::MAX + 1);
            }),
            "umask 1000: not a mode (0..=0777)"
        );
        let mut cmd = crate::Command::new("true");
        cmd.cpu_affinity([CpuList::MAX_CPU, 0, 0]).umask(Umask::MAX).rlimit(
            Resource::Nofile,
            64,
            RLIM_INFINITY,
        );
        let listing = cmd.plan().unwrap().to_string();
        for line in ["sched_setaffinity cpus 0,8191", "umask 0777", "setrlimit NOFILE 64:unlimited"]
        {
            assert!(listing.lines().any(|l| l == line), "{line:?} not in\n{listing}");
        }
    }

    fn resource() -> impl Strategy<Value = Resource> {
        proptest::sample::select(Resource::ALL.to_vec())
    }

    fn limit() -> impl Strategy<Value = u64> {
        prop_oneof![0u64..100_000, Just(RLIM_INFINITY), any::<u64>()]
    }

    proptest! {
        #[test]
        fn cpu_lists_round_trip(cpus in proptest::collection::vec(0..=CpuList::MAX_CPU, 1..40)) {
            let list = CpuList::new(cpus).unwrap();
            prop_assert_eq!(list.to_string().parse::<CpuList>(), Ok(list));
        }

        #[test]
        fn umasks_round_trip(bits in 0u32..=0o777) {
            let mask = Umask::new(bits).unwrap();
            prop_assert_eq!(mask.to_string().parse::<Umask>(), Ok(mask));
        }

        #[test]
        fn umasks_out_of_range(bits in 0o1000u32..) {
            prop_assert_eq!(Umask::new(bits), None);
            let text = format!("{bits:o}");
            prop_assert!(text.parse::<Umask>().is_err());
        }

        #[test]
        fn limits_round_trip(v in limit()) {
            prop_assert_eq!(Limit(v).to_string().parse::<Limit>(), Ok(Limit(v)));
        }

        #[test]
        fn rlimits_round_trip(r in resource(), a in limit(), b in limit()) {
            let spec = Rlimit::new(r, a.min(b), a.max(b)).unwrap();
            prop_assert_eq!(spec.to_string().parse::<Rlimit>(), Ok(spec));
            prop_assert_eq!(Rlimit::new(r, a, b).is_ok(), a <= b);
        }
    }
}
