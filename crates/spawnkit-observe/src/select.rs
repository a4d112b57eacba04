//! Which processes a listing shows: [`Selection`], procps' selectors (`-p`, `--ppid`,
//! `--tree-of`, effective uids) with procps' meaning, used by `spawnkit ps` and `spawnkit.ps()`.
//!
//! procps adds selectors up: `ps -p 1 --ppid 1` lists pid 1 and its children. With no
//! selector, every process is shown. A selector that matches nothing (a pid that does not
//! exist) adds nothing; it is not an error.

use spawnkit::{Error, Result};

use crate::process::{Fields, Process};
use crate::table::{tree_pids, ProcessTable};

/// A process selection: the union of what each selector selects, or every process when
/// there is none.
///
/// - `pids`: these processes;
/// - `ppids`: the direct children of these processes (0: the processes without a parent,
///   init and kthreadd);
/// - `trees`: these processes and all their descendants, followed through the whole
///   listing (a descendant is reached through its parent even when no other selector
///   keeps that parent);
/// - `uids`: the processes of these effective uids (procps `-u`).
///
/// A selector given with no items selects nothing, and is still a selector:
/// `Selection::all().pids([])` selects no process (a list of pids computed to be empty
/// does not mean "every process").
///
/// ```
/// use spawnkit_observe::Selection;
/// let s = Selection::all().pids([1])?.ppids([1])?; // pid 1 and its children (union)
/// assert!(!s.is_all());
/// # Ok::<(), spawnkit::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    pids: Vec<i32>,
    ppids: Vec<i32>,
    trees: Vec<i32>,
    uids: Vec<u32>,
    /// Whether any selector was given (even an empty one).
    given: bool,
}

/// A process id: a number above 0, or also 0 when `zero_ok` (`what` names the selector in
/// the error).
fn check_pid(what: &'static str, pid: i32, zero_ok: bool) -> Result<i32> {
    let why = match pid {
        1.. => return Ok(pid),
        0 if zero_ok => return Ok(pid),
        _ if zero_ok => "not a process id (a number, 0 or above)",
        _ => "not a process id (a number above 0)",
    };
    Err(Error::invalid("select", format!("{what} {pid}"), why))
}

fn add<T: Ord + Copy>(given: &mut bool, set: &mut Vec<T>, items: impl IntoIterator<Item = T>) {
    *given = true;
    set.extend(items);
    set.sort_unstable();
    set.dedup();
}

impl Selection {
    /// No selector: every process.
    pub fn all() -> Selection {
        Selection::default()
    }

    /// Also select these processes (each above 0).
    pub fn pids(mut self, pids: impl IntoIterator<Item = i32>) -> Result<Selection> {
        let pids: Vec<i32> =
            pids.into_iter().map(|p| check_pid("pid", p, false)).collect::<Result<_>>()?;
        add(&mut self.given, &mut self.pids, pids);
        Ok(self)
    }

    /// Also select the direct children of these processes (each 0 or above; 0 selects the
    /// processes without a parent).
    pub fn ppids(mut self, parents: impl IntoIterator<Item = i32>) -> Result<Selection> {
        let parents: Vec<i32> =
            parents.into_iter().map(|p| check_pid("ppid", p, true)).collect::<Result<_>>()?;
        add(&mut self.given, &mut self.ppids, parents);
        Ok(self)
    }

    /// Also select these processes and all their descendants (each above 0).
    pub fn tree_of(mut self, roots: impl IntoIterator<Item = i32>) -> Result<Selection> {
        let roots: Vec<i32> =
            roots.into_iter().map(|p| check_pid("tree-of", p, false)).collect::<Result<_>>()?;
        add(&mut self.given, &mut self.trees, roots);
        Ok(self)
    }

    /// Also select the processes whose effective uid is one of these.
    pub fn uids(mut self, uids: impl IntoIterator<Item = u32>) -> Selection {
        add(&mut self.given, &mut self.uids, uids);
        self
    }

    /// Whether this selects every process (no selector given).
    pub fn is_all(&self) -> bool {
        !self.given
    }

    fn only_pids(&self) -> bool {
        self.given && self.ppids.is_empty() && self.trees.is_empty() && self.uids.is_empty()
    }

    #[cfg(test)]
    fn is_empty_sets(&self) -> bool {
        self.pids.is_empty()
            && self.ppids.is_empty()
            && self.trees.is_empty()
            && self.uids.is_empty()
    }

    /// The fields a listing needs for this selection to be decided, added to `fields`
    /// (a uid selector needs the uid).
    pub fn fields(&self, fields: Fields) -> Fields {
        Fields { uid: fields.uid || !self.uids.is_empty(), ..fields }
    }

    /// Keep the selected processes of `listing`, in its order. Trees are followed through
    /// the whole `listing` first, so pass the whole table.
    pub fn filter(&self, mut listing: Vec<Process>) -> Vec<Process> {
        self.retain(&mut listing);
        listing
    }

    /// [`Selection::filter`] in place.
    pub fn retain(&self, listing: &mut Vec<Process>) {
        if self.is_all() {
            return;
        }
        let in_trees =
            if self.trees.is_empty() { Vec::new() } else { tree_pids(listing, &self.trees) };
        listing.retain(|p| {
            let has = |set: &[i32], v: i32| set.binary_search(&v).is_ok();
            has(&self.pids, p.pid)
                || has(&self.ppids, p.ppid)
                || has(&in_trees, p.pid)
                || p.uid.is_some_and(|u| self.uids.binary_search(&u).is_ok())
        });
    }

    /// Read the selected processes from `table`: only the pids' files when the selection is
    /// pids alone (the procfs backend reads no directory), else the whole table, filtered.
    pub fn list(&self, table: &mut ProcessTable, fields: Fields) -> Result<Vec<Process>> {
        let fields = self.fields(fields);
        if self.only_pids() {
            return table.list_pids(&self.pids, fields);
        }
        Ok(self.filter(table.list(fields)?))
    }

    /// Parse a `-p`/`--tree-of` item: a process id, a number above 0.
    pub fn parse_pid(s: &str) -> std::result::Result<i32, String> {
        match s.trim().parse::<i32>() {
            Ok(pid) if pid > 0 => Ok(pid),
            _ => Err(format!("'{s}' is not a pid (a number above 0)")),
        }
    }

    /// Parse a `--ppid` item: a process id or 0 (the parent of init and kthreadd).
    pub fn parse_ppid(s: &str) -> std::result::Result<i32, String> {
        match s.trim().parse::<i32>() {
            Ok(pid) if pid >= 0 => Ok(pid),
            _ => Err(format!("'{s}' is not a pid (a number, 0 or above)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{Comm, State};

    fn p(pid: i32, ppid: i32, uid: u32) -> Process {
        Process {
            pid,
            ppid,
            comm: Comm::new(b"x"),
            state: State::Sleeping,
            uid: Some(uid),
            threads: 1,
            start_ticks: 0,
            rss_bytes: 0,
            cmdline: None,
        }
    }

    /// 1 (0) ─ 2 ─ 4 ─ 6
    ///         └ 3   └ 5
    /// 7 (0) ─ 8
    fn sample() -> Vec<Process> {
        vec![
            p(1, 0, 0),
            p(2, 1, 0),
            p(3, 1, 1000),
            p(4, 2, 1000),
            p(5, 4, 0),
            p(6, 4, 0),
            p(7, 0, 0),
            p(8, 7, 2),
        ]
    }

    fn pids(s: &Selection) -> Vec<i32> {
        s.filter(sample()).iter().map(|p| p.pid).collect()
    }

    #[test]
    fn no_selector_is_every_process() {
        assert!(Selection::all().is_all());
        assert_eq!(pids(&Selection::all()), [1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn selectors_add_up_as_in_procps() {
        let s = Selection::all().pids([1]).unwrap().ppids([1]).unwrap();
        assert_eq!(pids(&s), [1, 2, 3]);
        let s = Selection::all().pids([6]).unwrap().ppids([7]).unwrap().uids([1000]);
        assert_eq!(pids(&s), [3, 4, 6, 8]);
        // The order of the calls and repeated items do not matter.
        let t = Selection::all().uids([1000, 1000]).ppids([7]).unwrap().pids([6, 6]).unwrap();
        assert_eq!(s, t);
    }

    #[test]
    fn tree_of_is_the_process_and_all_its_descendants() {
        let s = Selection::all().tree_of([2]).unwrap();
        assert_eq!(pids(&s), [2, 4, 5, 6]);
        // Followed through the whole listing: 5 is reached through 4, which no other
        // selector keeps; the union then adds 8.
        let s = Selection::all().tree_of([2]).unwrap().pids([8]).unwrap();
        assert_eq!(pids(&s), [2, 4, 5, 6, 8]);
        // A root missing from the listing still has its listed children as descendants.
        let listing = vec![p(10, 9, 0), p(11, 10, 0)];
        let s = Selection::all().tree_of([9]).unwrap();
        assert_eq!(s.filter(listing).iter().map(|p| p.pid).collect::<Vec<_>>(), [10, 11]);
    }

    #[test]
    fn an_empty_selector_selects_nothing() {
        let s = Selection::all().pids([]).unwrap();
        assert!(!s.is_all() && s.is_empty_sets());
        assert_eq!(pids(&s), Vec::<i32>::new());
        assert_eq!(pids(&Selection::all().uids([])), Vec::<i32>::new());
        // ... and adds nothing to the others.
        let s = Selection::all().tree_of([]).unwrap().ppids([7]).unwrap();
        assert_eq!(pids(&s), [8]);
    }

    #[test]
    fn ppid_zero_is_the_processes_without_a_parent() {
        let s = Selection::all().ppids([0]).unwrap();
        assert_eq!(pids(&s), [1, 7]);
    }

    #[test]
    fn a_pid_that_does_not_exist_selects_nothing() {
        assert_eq!(pids(&Selection::all().pids([99]).unwrap()), Vec::<i32>::new());
        assert_eq!(pids(&Selection::all().ppids([99]).unwrap()), Vec::<i32>::new());
        assert_eq!(pids(&Selection::all().tree_of([99]).unwrap()), Vec::<i32>::new());
        assert_eq!(pids(&Selection::all().pids([99, 3]).unwrap()), [3]);
    }

    #[test]
    fn bad_pids_are_refused() {
        for bad in [0, -1] {
            let e = Selection::all().pids([bad]).unwrap_err();
            assert_eq!(e.kind(), spawnkit::ErrorKind::InvalidInput);
            assert!(e.to_string().contains("not a process id"), "{e}");
            assert!(Selection::all().tree_of([bad]).is_err());
        }
        let e = Selection::all().ppids([-1]).unwrap_err();
        assert_eq!(e.to_string(), "select ppid -1: not a process id (a number, 0 or above)");
        assert!(Selection::all().ppids([0]).is_ok());
        assert_eq!(Selection::parse_pid(" 12"), Ok(12));
        assert!(Selection::parse_pid("0").unwrap_err().contains("is not a pid"));
        assert!(Selection::parse_pid("x").is_err() && Selection::parse_pid("-3").is_err());
        assert_eq!(Selection::parse_ppid("0"), Ok(0));
        assert!(Selection::parse_ppid("-1").is_err());
    }

    #[test]
    fn a_uid_selector_asks_for_the_uid() {
        let f = Fields { uid: false, cmdline: true };
        assert_eq!(Selection::all().fields(f), f);
        assert_eq!(Selection::all().uids([0]).fields(f), Fields { uid: true, cmdline: true });
        // A process whose uid was not read is not selected by uid.
        let mut q = p(3, 1, 0);
        q.uid = None;
        assert!(Selection::all().uids([0]).filter(vec![q]).is_empty());
    }
}
