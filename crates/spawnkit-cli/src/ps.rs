//! `spawnkit ps`: the process table, procps field names, filters, sorting, a tree view and
//! JSON, read by the library's [`ProcessTable`] (BPF task iterator or /proc walker).
//!
//! Exit codes: 0; 1 when no process matched (as procps) or the table cannot be read (e.g.
//! `--backend bpf` where BPF is not available); 125 for a bad option or value (clap, as for
//! every spawnkit command). A closed stdout (`spawnkit ps | head`) ends the output quietly
//! with 0.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use spawnkit_observe::{
    self as observe, Backend, Fields, Process, ProcessTable, Selection, SortKey, State, TreeRow,
};

use crate::out::{note, stdout_writer, Failure};

/// The table could not be read, or no process matched.
const FAILED: i32 = 1;

const AFTER_HELP: &str = "\
Examples:
  spawnkit ps                                   (every process: pid, ppid, state, threads,
                                                 rss in KiB, comm)
  spawnkit ps -o pid,user,rss,args --sort=-rss  (largest resident set first)
  spawnkit ps -p 1,$$ -o pid,lstart,etimes,args (two processes: start time, seconds alive)
  spawnkit ps --ppid 1 -o pid,comm              (the direct children of pid 1)
  spawnkit ps --tree-of $$ --forest -o pid,args (this shell and all it started, as a tree)
  spawnkit ps -o pid=ID,comm=NAME --no-headers  (rename or drop the headers)
  spawnkit ps --json -o pid,ppid,comm,rss       (a JSON array: [{\"pid\": 1, ...}, ...])
  spawnkit ps --backend procfs -v               (force the /proc walker; say what ran)

spawnkit ps never lists its own process (as pgrep), so `--ppid $$` shows only what the
shell started, and the command agrees with Python's spawnkit.ps() on every selection.

Fields (for -o and --sort; procps names, aliases in parentheses, then the header):
  pid                  PID      process id
  ppid                 PPID     parent's process id (0 for init and kthreadd)
  comm (ucomm)         COMMAND  short name (at most 15 bytes; control characters as '?')
  state (s)            S        R running, S sleeping, D disk wait, T stopped, t traced,
                                Z zombie, I idle kernel thread, P parked, X dead
  uid (euid)           UID      effective user id
  user                 USER     user name from /etc/passwd, or the uid when unknown
  nlwp (thcount)       NLWP     number of threads
  start_time           START    start time: HH:MM today, MonDD this year, else the year
  lstart               STARTED  start time in full: 'Sun Nov 22 01:49:32 2026'
  etimes               ELAPSED  whole seconds since the start
  rss (rssize, rsz)    RSS      resident set size in KiB, from the kernel's counters as
                                /proc/PID/stat shows them (per-CPU parts not summed): it
                                can differ from the exact VmRSS that procps shows by up to
                                a few hundred KiB per CPU
  args (cmd, command)  COMMAND  command line, arguments joined by spaces; [comm] when it
                                is empty (kernel threads; zombies add ' <defunct>')
  An alias keeps its procps header (euid EUID, thcount THCNT, rsz RSZ, cmd CMD).
  FIELD=HEADER sets a column's header; when every header is empty, no header line.
  Columns are laid out as procps does: a column is as wide as its header or its usual
  width; comm, args and user are cut to that width unless they are the last column (a
  cut user name ends in '+'); numbers are never cut.

Selection:
  -p, --ppid and --tree-of add up: a process is shown when it matches any of them. With
  none of them, every process is shown. Lists are comma-separated; the options repeat.

JSON (--json):
  An array with one object per process, keyed by the fields' names above (aliases give
  the main name): numbers for pid, ppid, uid, nlwp, etimes, rss (KiB); start_time in Unix
  seconds (a float); state a one-letter string; comm, user, lstart and args strings. With
  --forest, a 'depth' key (0 for a root) and the tree's order.

Backends (--backend):
  auto (default) uses the BPF task iterator (one read for all tasks; root or
  CAP_BPF+CAP_PERFMON, kernel 5.8+) and falls back to procfs when it cannot load or would
  show more than /proc shows you (a /proc mounted hidepid=, another pid namespace's); bpf
  fails instead of falling back; procfs walks /proc (one read of /proc/PID/stat per
  process, plus status for uid/user and cmdline for args). -v says which ran and why.

Exit status:
  0 when at least one process was shown (also when stdout is closed early, as by 'head');
  1 when no process matched (the header or '[]' is still written, as procps does: so
  'spawnkit ps -p PID >/dev/null' tests whether PID exists) or the process table cannot
  be read (with a message on stderr); 125 for a bad option or value.";

/// Options of `spawnkit ps`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct PsArgs {
    /// Fields to show, comma-separated, in order (repeatable); see the list below.
    /// Default: pid,ppid,state,nlwp,rss,comm.
    #[arg(
        short = 'o',
        long = "format",
        value_name = "FIELD[=HEADER],...",
        value_delimiter = ',',
        value_parser = parse_column
    )]
    pub format: Vec<Column>,

    /// Show these processes (comma-separated pids; repeatable).
    #[arg(short = 'p', long = "pid", value_name = "PID,...", value_delimiter = ',',
          value_parser = Selection::parse_pid, allow_negative_numbers = true,
          help_heading = "Selection")]
    pub pid: Option<Vec<i32>>,

    /// Show the direct children of these processes.
    #[arg(long, value_name = "PID,...", value_delimiter = ',', value_parser = Selection::parse_ppid,
          allow_negative_numbers = true, help_heading = "Selection")]
    pub ppid: Option<Vec<i32>>,

    /// Show these processes and all their descendants.
    #[arg(long, value_name = "PID,...", value_delimiter = ',', value_parser = Selection::parse_pid,
          allow_negative_numbers = true, help_heading = "Selection")]
    pub tree_of: Option<Vec<i32>>,

    /// Sort by these fields, the first one first; '-FIELD' sorts in descending order
    /// (--sort=-rss,pid). Default: by pid.
    #[arg(
        long,
        value_name = "[-]FIELD,...",
        value_delimiter = ',',
        allow_hyphen_values = true,
        value_parser = parse_sort_key,
        help_heading = "Output"
    )]
    pub sort: Vec<(Field, bool)>,

    /// Show the process tree: children under their parent (oldest first, or in --sort
    /// order), comm/args indented with '\_'. Trees come in that order too (procps lists them
    /// last first: kthreadd's before init's).
    #[arg(short = 'f', long, help_heading = "Output")]
    pub forest: bool,

    /// Leave out the header line.
    #[arg(long, alias = "no-heading", help_heading = "Output")]
    pub no_headers: bool,

    /// Print a JSON array of objects keyed by field name instead of a table.
    #[arg(long, help_heading = "Output")]
    pub json: bool,

    /// Where to read the process table from: auto, bpf or procfs.
    #[arg(long, value_name = "BACKEND", default_value = "auto", value_parser = str::parse::<Backend>)]
    pub backend: Backend,

    /// Say on stderr which backend read the table, and why BPF was not used when it was not.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

impl PsArgs {
    /// The processes to show: `-p`, `--ppid` and `--tree-of` as one [`Selection`] (procps'
    /// union; none of them: every process).
    fn selection(&self) -> spawnkit::Result<Selection> {
        let mut s = Selection::all();
        if let Some(pids) = &self.pid {
            s = s.pids(pids.iter().copied())?;
        }
        if let Some(parents) = &self.ppid {
            s = s.ppids(parents.iter().copied())?;
        }
        if let Some(roots) = &self.tree_of {
            s = s.tree_of(roots.iter().copied())?;
        }
        Ok(s)
    }
}

/// A field of the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Pid,
    Ppid,
    Comm,
    State,
    Uid,
    User,
    Nlwp,
    StartTime,
    Lstart,
    Etimes,
    Rss,
    Args,
}

/// Every accepted name, as procps spells it: (name, field, default header, minimum width).
/// Aliases keep their own header and width (`euid` is EUID, `thcount` THCNT 5 wide).
const NAMES: &[(&str, Field, &str, usize)] = &[
    ("pid", Field::Pid, "PID", 5),
    ("ppid", Field::Ppid, "PPID", 5),
    ("comm", Field::Comm, "COMMAND", 15),
    ("ucomm", Field::Comm, "COMMAND", 15),
    ("state", Field::State, "S", 1),
    ("s", Field::State, "S", 1),
    ("uid", Field::Uid, "UID", 5),
    ("euid", Field::Uid, "EUID", 5),
    ("user", Field::User, "USER", 8),
    ("nlwp", Field::Nlwp, "NLWP", 4),
    ("thcount", Field::Nlwp, "THCNT", 5),
    ("start_time", Field::StartTime, "START", 5),
    ("lstart", Field::Lstart, "STARTED", 24),
    ("etimes", Field::Etimes, "ELAPSED", 7),
    ("rss", Field::Rss, "RSS", 5),
    ("rssize", Field::Rss, "RSS", 5),
    ("rsz", Field::Rss, "RSZ", 5),
    ("args", Field::Args, "COMMAND", 27),
    ("cmd", Field::Args, "CMD", 27),
    ("command", Field::Args, "COMMAND", 27),
];

const DEFAULT_FIELDS: [Field; 6] =
    [Field::Pid, Field::Ppid, Field::State, Field::Nlwp, Field::Rss, Field::Comm];

impl Field {
    /// The main name: the JSON key.
    fn key(self) -> &'static str {
        match self {
            Field::Pid => "pid",
            Field::Ppid => "ppid",
            Field::Comm => "comm",
            Field::State => "state",
            Field::Uid => "uid",
            Field::User => "user",
            Field::Nlwp => "nlwp",
            Field::StartTime => "start_time",
            Field::Lstart => "lstart",
            Field::Etimes => "etimes",
            Field::Rss => "rss",
            Field::Args => "args",
        }
    }

    /// How procps lays the column out.
    fn align(self) -> Align {
        match self {
            Field::Comm | Field::Args => Align::Text,
            Field::User => Align::User,
            Field::State => Align::Left,
            Field::Pid
            | Field::Ppid
            | Field::Uid
            | Field::Nlwp
            | Field::StartTime
            | Field::Lstart
            | Field::Etimes
            | Field::Rss => Align::Right,
        }
    }

    fn needs(self, fields: &mut Fields) {
        match self {
            Field::Uid | Field::User => fields.uid = true,
            Field::Args => fields.cmdline = true,
            _ => {}
        }
    }

    fn is_name(self) -> bool {
        matches!(self, Field::Comm | Field::Args)
    }
}

/// How a column is aligned, and what happens to a value wider than the column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Align {
    /// Numbers and times: right-aligned; a wider value pushes the rest of the line.
    Right,
    /// The state letter: left-aligned.
    Left,
    /// comm and args: left-aligned; cut at the column's width unless it is the last column.
    Text,
    /// user: left-aligned; a longer name is cut with a '+' unless it is the last column.
    User,
}

fn lookup(name: &str) -> Result<Column, String> {
    let found = NAMES.iter().find(|n| n.0 == name);
    let &(_, field, header, width) = found.ok_or_else(|| {
        let all: Vec<&str> = NAMES.iter().map(|n| n.0).collect();
        format!("unknown field '{name}' (fields: {})", all.join(", "))
    })?;
    Ok(Column { field, header: header.to_string(), width })
}

/// One output column: a field, its header and its minimum width.
#[derive(Clone, Debug)]
pub struct Column {
    field: Field,
    header: String,
    width: usize,
}

impl Column {
    fn of(field: Field) -> Column {
        let found = NAMES.iter().find(|n| n.1 == field);
        let &(_, field, header, width) = found.expect("every field has a name");
        Column { field, header: header.to_string(), width }
    }
}

fn parse_column(s: &str) -> Result<Column, String> {
    let (name, header) = match s.split_once('=') {
        Some((name, header)) => (name, Some(header)),
        None => (s, None),
    };
    let mut column = lookup(name.trim())?;
    if let Some(header) = header {
        column.header = header.to_string();
    }
    Ok(column)
}

fn parse_sort_key(s: &str) -> Result<(Field, bool), String> {
    let s = s.trim();
    let (name, descending) = match (s.strip_prefix('-'), s.strip_prefix('+')) {
        (Some(name), _) => (name, true),
        (None, Some(name)) => (name, false),
        _ => (s, false),
    };
    Ok((lookup(name)?.field, descending))
}

pub fn main(args: &PsArgs) -> i32 {
    match run(args) {
        Ok(code) => code,
        Err(Failure::Pipe) => 0,
        Err(Failure::Msg(m)) => {
            note!("spawnkit ps: {m}");
            FAILED
        }
    }
}

/// The table written; the exit code: 0, or [`FAILED`] (without a message, as procps) when
/// there was no process to show.
fn run(args: &PsArgs) -> Result<i32, Failure> {
    let columns: Vec<Column> = if args.format.is_empty() {
        DEFAULT_FIELDS.iter().map(|&f| Column::of(f)).collect()
    } else {
        args.format.clone()
    };
    let mut fields = Fields::default();
    for f in columns.iter().map(|c| c.field).chain(args.sort.iter().map(|s| s.0)) {
        f.needs(&mut fields);
    }

    let mut table = ProcessTable::new(args.backend)?;
    if args.verbose {
        let mut msg = format!("spawnkit ps: backend {}", table.backend());
        if let Some(why) = table.fallback_reason() {
            msg += &format!(" (BPF not used: {why})");
        }
        note!("{msg}");
    }

    let mut procs = args.selection()?.list(&mut table, fields)?;
    // Never itself, as pgrep: this process is an artefact of asking (a child of the shell
    // that asks, so `--ppid $$` would catch it), and without it the command and Python's
    // `spawnkit.ps()` with the same selection list the same processes.
    let me = std::process::id() as i32;
    procs.retain(|p| p.pid != me);

    let ctx = Context::new(&columns, &args.sort)?;
    observe::sort_processes(&mut procs, SortKey::Pid, false);
    if args.forest && args.sort.is_empty() {
        // procps orders a tree's siblings by start time (not the same as by pid once pids
        // have wrapped around).
        observe::sort_processes(&mut procs, SortKey::StartTime, false);
    }
    for &(field, descending) in args.sort.iter().rev() {
        sort_by_field(&mut procs, field, descending, &ctx);
    }
    let rows: Vec<TreeRow> = if args.forest {
        observe::tree_order(&procs)
    } else {
        (0..procs.len())
            .map(|i| TreeRow { index: i, pid: procs[i].pid, depth: 0, more_siblings: false })
            .collect()
    };

    let mut out = stdout_writer();
    if args.json {
        write_json(&mut out, &columns, &procs, &rows, args.forest, &ctx)?;
    } else {
        let prefixes = if args.forest { observe::tree_prefixes(&rows) } else { Vec::new() };
        write_table(&mut out, &columns, &procs, &rows, &prefixes, !args.no_headers, &ctx)?;
    }
    out.flush()?;
    // As procps: no process to show is exit status 1 (`ps -p PID` tests for a process).
    Ok(if rows.is_empty() { FAILED } else { 0 })
}

/// What rendering needs beyond the processes: clocks, boot time, user names, pid width.
struct Context {
    /// The real-time clock (Unix seconds), for start_time's "today".
    now: f64,
    /// Seconds since boot, for etimes: the clock start times count on, so no rounding of
    /// the boot time enters (as procps computes it).
    uptime: f64,
    boot_time: u64,
    users: HashMap<u32, String>,
    pid_width: usize,
}

impl Context {
    fn new(columns: &[Column], sort: &[(Field, bool)]) -> Result<Context, Failure> {
        let used = |f: Field| columns.iter().any(|c| c.field == f) || sort.iter().any(|s| s.0 == f);
        let timed = used(Field::StartTime) || used(Field::Lstart);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        Ok(Context {
            now,
            uptime: observe::uptime(),
            boot_time: if timed { observe::boot_time()? } else { 0 },
            users: if used(Field::User) { read_passwd() } else { HashMap::new() },
            pid_width: pid_width(),
        })
    }

    fn user(&self, uid: Option<u32>) -> String {
        match uid {
            Some(uid) => self.users.get(&uid).cloned().unwrap_or_else(|| uid.to_string()),
            None => "?".into(),
        }
    }

    fn start(&self, p: &Process) -> f64 {
        p.start_time(self.boot_time)
    }

    /// procps `etimes`: whole seconds since the start.
    fn elapsed(&self, p: &Process) -> u64 {
        p.elapsed(self.uptime) as u64
    }
}

/// Digits of the largest pid (/proc/sys/kernel/pid_max), as procps sizes its pid columns.
fn pid_width() -> usize {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(7, |max| max.saturating_sub(1).to_string().len().max(5))
}

/// uid -> name from /etc/passwd (the first entry of a uid wins, as getpwuid finds it).
fn read_passwd() -> HashMap<u32, String> {
    let mut users = HashMap::new();
    let text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    for line in text.lines() {
        let mut parts = line.split(':');
        let (Some(name), Some(_), Some(uid)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if let Ok(uid) = uid.parse::<u32>() {
            users.entry(uid).or_insert_with(|| name.to_string());
        }
    }
    users
}

fn sort_by_field(procs: &mut [Process], field: Field, descending: bool, ctx: &Context) {
    let key = match field {
        Field::Pid => SortKey::Pid,
        Field::Ppid => SortKey::Ppid,
        Field::Comm => SortKey::Comm,
        Field::State => SortKey::State,
        Field::Uid => SortKey::Uid,
        Field::Nlwp => SortKey::Threads,
        Field::StartTime | Field::Lstart => SortKey::StartTime,
        // Longest-running first is "descending" elapsed time: the earliest start.
        Field::Etimes => return observe::sort_processes(procs, SortKey::StartTime, !descending),
        Field::Rss => SortKey::Rss,
        Field::Args => SortKey::Cmdline,
        Field::User => {
            let name = |p: &Process| ctx.user(p.uid);
            if descending {
                procs.sort_by_cached_key(|p| std::cmp::Reverse(name(p)));
            } else {
                procs.sort_by_cached_key(name);
            }
            return;
        }
    };
    observe::sort_processes(procs, key, descending);
}

/// Text as procps shows it in a UTF-8 locale: control characters (C0, DEL, C1) and each
/// byte that is not part of valid UTF-8 as '?'.
fn printable(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        out.extend(chunk.valid().chars().map(|c| if c.is_control() { '?' } else { c }));
        out.extend(chunk.invalid().iter().map(|_| '?'));
    }
}

/// The command line joined by spaces, or `[comm]` when it is empty or unread (procps adds
/// ` <defunct>` for a zombie).
fn args_text(p: &Process) -> Vec<u8> {
    let mut joined = Vec::new();
    for (i, a) in p.args().enumerate() {
        if i > 0 {
            joined.push(b' ');
        }
        joined.extend_from_slice(a);
    }
    if joined.is_empty() {
        joined.push(b'[');
        joined.extend_from_slice(p.comm.as_bytes());
        joined.push(b']');
        if p.state == State::Zombie {
            joined.extend_from_slice(b" <defunct>");
        }
    }
    joined
}

/// The text of one cell (names with control characters replaced).
fn cell(out: &mut String, field: Field, p: &Process, ctx: &Context) {
    match field {
        Field::Pid => write!(out, "{}", p.pid).unwrap_or(()),
        Field::Ppid => write!(out, "{}", p.ppid).unwrap_or(()),
        Field::Comm => printable(out, p.comm.as_bytes()),
        Field::State => out.push(p.state.letter()),
        Field::Uid => match p.uid {
            Some(uid) => write!(out, "{uid}").unwrap_or(()),
            None => out.push('?'),
        },
        Field::User => out.push_str(&ctx.user(p.uid)),
        Field::Nlwp => write!(out, "{}", p.threads).unwrap_or(()),
        Field::StartTime => out.push_str(&short_start(ctx.start(p), ctx.now)),
        Field::Lstart => out.push_str(&long_start(ctx.start(p))),
        Field::Etimes => write!(out, "{}", ctx.elapsed(p)).unwrap_or(()),
        Field::Rss => write!(out, "{}", p.rss_bytes / 1024).unwrap_or(()),
        Field::Args => {
            // procps reads command lines with newlines turned into spaces, like the NULs.
            let mut text = args_text(p);
            text.iter_mut().filter(|b| **b == b'\n').for_each(|b| *b = b' ');
            printable(out, &text)
        }
    }
}

fn write_table(
    out: &mut impl Write,
    columns: &[Column],
    procs: &[Process],
    rows: &[TreeRow],
    prefixes: &[String],
    headers: bool,
    ctx: &Context,
) -> io::Result<()> {
    // (width, alignment, last): procps widens a column to its header, and cuts text that
    // does not fit only in columns that are not last.
    let layout: Vec<(usize, Align, bool)> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let width = match c.field {
                Field::Pid | Field::Ppid => ctx.pid_width,
                _ => c.width,
            };
            (width.max(c.header.chars().count()), c.field.align(), i + 1 == columns.len())
        })
        .collect();
    let mut line = String::with_capacity(256);
    let mut text = String::with_capacity(64);
    let mut emit = |line: &mut String, header: bool, cells: &mut dyn FnMut(usize, &mut String)| {
        line.clear();
        for (i, &(width, align, last)) in layout.iter().enumerate() {
            if i > 0 {
                line.push(' ');
            }
            text.clear();
            cells(i, &mut text);
            if !header && !last {
                fit(&mut text, width, align);
            }
            let pad = width.saturating_sub(text.chars().count());
            if align == Align::Right {
                line.extend((0..pad).map(|_| ' '));
            }
            line.push_str(&text);
            if align != Align::Right && !last {
                line.extend((0..pad).map(|_| ' '));
            }
        }
        line.push('\n');
    };
    if headers && columns.iter().any(|c| !c.header.is_empty()) {
        emit(&mut line, true, &mut |i, t| t.push_str(&columns[i].header));
        out.write_all(line.as_bytes())?;
    }
    for (r, row) in rows.iter().enumerate() {
        let p = &procs[row.index];
        emit(&mut line, false, &mut |i, t| {
            let field = columns[i].field;
            if field.is_name() {
                if let Some(prefix) = prefixes.get(r) {
                    t.push_str(prefix);
                }
            }
            cell(t, field, p, ctx);
        });
        out.write_all(line.as_bytes())?;
    }
    Ok(())
}

/// Cut a cell that is wider than its column, as procps does for a column that is not the
/// last: comm and args (forest prefix included) at the width, a user name at the width
/// with a '+' in the last place. Numbers are never cut.
fn fit(text: &mut String, width: usize, align: Align) {
    let keep = match align {
        Align::Text => width,
        Align::User => width.saturating_sub(1),
        Align::Right | Align::Left => return,
    };
    if text.chars().count() <= width {
        return;
    }
    let at = text.char_indices().nth(keep).map_or(text.len(), |(at, _)| at);
    text.truncate(at);
    if align == Align::User {
        text.push('+');
    }
}

fn json_value(field: Field, p: &Process, ctx: &Context) -> serde_json::Value {
    use serde_json::Value;
    let text = |b: &[u8]| Value::String(String::from_utf8_lossy(b).into_owned());
    match field {
        Field::Pid => p.pid.into(),
        Field::Ppid => p.ppid.into(),
        Field::Comm => text(p.comm.as_bytes()),
        Field::State => Value::String(p.state.letter().to_string()),
        Field::Uid => p.uid.map_or(Value::Null, Value::from),
        Field::User => Value::String(ctx.user(p.uid)),
        Field::Nlwp => p.threads.into(),
        Field::StartTime => ctx.start(p).into(),
        Field::Lstart => Value::String(long_start(ctx.start(p))),
        Field::Etimes => ctx.elapsed(p).into(),
        Field::Rss => (p.rss_bytes / 1024).into(),
        Field::Args => text(&args_text(p)),
    }
}

fn write_json(
    out: &mut impl Write,
    columns: &[Column],
    procs: &[Process],
    rows: &[TreeRow],
    forest: bool,
    ctx: &Context,
) -> io::Result<()> {
    let mut fields: Vec<Field> = Vec::new();
    for c in columns {
        if !fields.contains(&c.field) {
            fields.push(c.field);
        }
    }
    out.write_all(b"[")?;
    for (r, row) in rows.iter().enumerate() {
        let p = &procs[row.index];
        out.write_all(if r == 0 { b"\n{" } else { b",\n{" })?;
        for (i, &f) in fields.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            write!(out, "\"{}\":", f.key())?;
            serde_json::to_writer(&mut *out, &json_value(f, p, ctx))?;
        }
        if forest {
            write!(out, "{}\"depth\":{}", if fields.is_empty() { "" } else { "," }, row.depth)?;
        }
        out.write_all(b"}")?;
    }
    out.write_all(if rows.is_empty() { b"]\n" } else { b"\n]\n" })
}

/// Local broken-down time of Unix second `t`.
fn local(t: i64) -> libc::tm {
    spawnkit_observe::local_time(t)
}

const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS: [&str; 12] =
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

fn month(tm: &libc::tm) -> &'static str {
    MONTHS.get(tm.tm_mon as usize).copied().unwrap_or("???")
}

/// procps `lstart`: `Sun Nov 22 01:49:32 2026` (strftime "%a %b %e %H:%M:%S %Y").
fn long_start(start: f64) -> String {
    let tm = local(start as i64);
    format!(
        "{} {} {:>2} {:02}:{:02}:{:02} {}",
        DAYS.get(tm.tm_wday as usize).copied().unwrap_or("???"),
        month(&tm),
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        tm.tm_year + 1900
    )
}

/// procps `start_time`: `HH:MM` when started today, `MonDD` this year, else the year.
fn short_start(start: f64, now: f64) -> String {
    let (tm, today) = (local(start as i64), local(now as i64));
    if tm.tm_year != today.tm_year {
        format!("{}", tm.tm_year + 1900)
    } else if tm.tm_yday != today.tm_yday {
        format!("{}{:02}", month(&tm), tm.tm_mday)
    } else {
        format!("{:02}:{:02}", tm.tm_hour, tm.tm_min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases() {
        assert_eq!(lookup("rsz").unwrap().field, Field::Rss);
        assert_eq!(lookup("thcount").unwrap().field, Field::Nlwp);
        assert_eq!(
            (lookup("thcount").unwrap().header.as_str(), lookup("thcount").unwrap().width),
            ("THCNT", 5)
        );
        assert_eq!(parse_column("cmd").unwrap().header, "CMD");
        assert_eq!(parse_column("rsz").unwrap().header, "RSZ");
        assert!(lookup("bogus").unwrap_err().contains("unknown field 'bogus'"));
        let c = parse_column("pid=ID").unwrap();
        assert_eq!((c.field, c.header.as_str()), (Field::Pid, "ID"));
        assert_eq!(parse_column("euid").unwrap().header, "EUID");
        assert_eq!(parse_sort_key("-rss").unwrap(), (Field::Rss, true));
        assert_eq!(parse_sort_key("+pid").unwrap(), (Field::Pid, false));
    }

    #[test]
    fn printable_as_procps() {
        let show = |b: &[u8]| {
            let mut s = String::new();
            printable(&mut s, b);
            s
        };
        assert_eq!(show(b"x\xff\xfey\x01z\xc3\xa9\t!\x7f"), "x??y?z\u{e9}?!?");
        assert_eq!(show("a\u{85}b\u{a0}".as_bytes()), "a?b\u{a0}");
        assert_eq!(show(b"\xe2\x82"), "??");
    }

    #[test]
    fn cells_that_do_not_fit() {
        let cut = |s: &str, width, align| {
            let mut t = s.to_string();
            fit(&mut t, width, align);
            t
        };
        assert_eq!(cut("systemd-timesync", 8, Align::User), "systemd+");
        assert_eq!(cut("root", 8, Align::User), "root");
        assert_eq!(cut("12345678", 8, Align::User), "12345678");
        assert_eq!(
            cut("/usr/bin/python3 -m http.server", 27, Align::Text),
            "/usr/bin/python3 -m http.se"
        );
        assert_eq!(cut("é".repeat(20).as_str(), 15, Align::Text), "é".repeat(15));
        assert_eq!(cut("123456789", 5, Align::Right), "123456789");
    }

    #[test]
    fn times() {
        // 2026-11-22 01:49:32 UTC was a Sunday.
        std::env::set_var("TZ", "UTC");
        assert_eq!(long_start(1_795_312_172.0), "Sun Nov 22 01:49:32 2026");
        assert_eq!(short_start(1_795_312_172.0, 1_795_312_172.0 + 60.0), "01:49");
        assert_eq!(short_start(1_795_312_172.0, 1_795_312_172.0 + 86400.0 * 3.0), "Nov22");
        assert_eq!(short_start(1_795_312_172.0, 1_795_312_172.0 + 86400.0 * 60.0), "2026");
    }
}
