//! User and group names: one parser and printer each ([`User`], [`Group`]), resolved to ids
//! in the parent with getpwnam_r(3) and getgrnam_r(3) (never in the child).

use std::fmt;
use std::io;
use std::str::FromStr;

use crate::sys;

/// Why a name did not resolve to an id.
#[derive(Debug)]
pub enum LookupError {
    /// No user (group) of that name.
    NotFound,
    /// The lookup itself failed (NSS, I/O).
    Failed(io::Error),
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupError::NotFound => f.write_str("not found"),
            LookupError::Failed(e) => write!(f, "lookup failed: {e}"),
        }
    }
}

impl std::error::Error for LookupError {}

/// Why a string is not a user or group: empty, or all digits but above `u32::MAX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseIdError(String);

impl fmt::Display for ParseIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseIdError {}

/// A numeric id stands for itself; anything else is a name.
fn parse(s: &str) -> Result<Result<u32, String>, ParseIdError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(ParseIdError("empty user or group".into()));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u32>().map(Ok).map_err(|_| ParseIdError(format!("{s} is out of range")));
    }
    Ok(Err(s.to_string()))
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $what:literal, $resolve:ident, $lookup:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            /// A numeric id, used as it is (no lookup).
            Id(u32),
            /// A name, looked up when resolved.
            Name(String),
        }

        impl $name {
            /// The numeric id: itself, or the name looked up.
            pub fn $resolve(&self) -> Result<u32, LookupError> {
                match self {
                    $name::Id(n) => Ok(*n),
                    $name::Name(name) => match $lookup(name.as_str()) {
                        Ok(Some(n)) => Ok(n),
                        Ok(None) => Err(LookupError::NotFound),
                        Err(e) => Err(LookupError::Failed(io::Error::from_raw_os_error(e))),
                    },
                }
            }

            /// "user" or "group", for messages.
            pub fn kind(&self) -> &'static str {
                $what
            }
        }

        impl FromStr for $name {
            type Err = ParseIdError;
            /// `"0"` is id 0, `"nobody"` a name; surrounding blanks are ignored; the empty
            /// string and ids above `u32::MAX` are errors.
            fn from_str(s: &str) -> Result<$name, ParseIdError> {
                Ok(match parse(s)? {
                    Ok(n) => $name::Id(n),
                    Err(name) => $name::Name(name),
                })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $name::Id(n) => write!(f, "{n}"),
                    $name::Name(s) => f.write_str(s),
                }
            }
        }
    };
}

id_type!(
    /// A user, by uid or name (`--uid root`, `--uid 0`); [`User::uid`] resolves it.
    User,
    "user",
    uid,
    |name| sys::nss::user_by_name(name).map(|found| found.map(|(uid, _)| uid))
);

id_type!(
    /// A group, by gid or name (`--gid adm`, `--gid 4`); [`Group::gid`] resolves it.
    Group,
    "group",
    gid,
    sys::nss::group_by_name
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        assert_eq!("0".parse(), Ok(User::Id(0)));
        assert_eq!(" 65534 ".parse(), Ok(Group::Id(65534)));
        assert_eq!("nobody".parse(), Ok(User::Name("nobody".into())));
        assert!("".parse::<User>().is_err());
        assert!("99999999999".parse::<Group>().unwrap_err().to_string().contains("out of range"));
        assert_eq!(User::Name("root".into()).to_string(), "root");
        assert_eq!(Group::Id(4).to_string(), "4");
    }

    #[test]
    fn resolve() {
        assert_eq!(User::Name("root".into()).uid().unwrap(), 0);
        assert_eq!(Group::Name("root".into()).gid().unwrap(), 0);
        assert_eq!(User::Id(12345).uid().unwrap(), 12345);
        assert!(matches!(
            User::Name("no-such-user-spawnkit".into()).uid(),
            Err(LookupError::NotFound)
        ));
        assert!(matches!(
            Group::Name("no-such-group-spawnkit".into()).gid(),
            Err(LookupError::NotFound)
        ));
    }
}
