//! The tables on stdout, the ratio lines that close them, and the JSON file.

use serde_json::{json, Map, Value};

use super::async_spawn::{self, AsyncResults};
use super::cpu::{self, CpuRow};
use super::fence::{self, FenceRow};
use super::latency::{self, LatencyRow, Size};
use super::mp::{self, MpResults};
use super::server::{self, ServerResults};
use super::worker::{self, WorkerResults};
use super::Results;

/// The report's text, built before anything is written: `write!`/`writeln!` on it cannot fail
/// (its `write_fmt` returns nothing), and stdout sees one write whose error, if any, is
/// reported once.
#[derive(Default)]
pub struct Text(pub String);

impl Text {
    pub fn write_fmt(&mut self, args: std::fmt::Arguments<'_>) {
        // Formatting into a String fails only if a Display impl does; none here does.
        let _ = std::fmt::Write::write_fmt(&mut self.0, args);
    }
}

/// A ratio of minimum latencies that matters, with its target.
pub struct Ratio {
    /// The key in the JSON `ratios` object.
    pub key: &'static str,
    pub num: &'static str,
    pub den: &'static str,
    /// The target: the ratio should be at most this.
    pub target: f64,
}

pub const RATIOS: [Ratio; 3] = [
    Ratio { key: "spawnkit/vfork", num: "spawnkit_clone_vfork", den: "vfork_exec", target: 1.10 },
    Ratio {
        key: "spawnkit/posix_spawn",
        num: "spawnkit_clone_vfork",
        den: "posix_spawnp",
        target: 0.70,
    },
    Ratio {
        key: "spawnkit.subprocess/subprocess",
        num: "py_spawnkit_subprocess",
        den: "py_subprocess",
        target: 0.50,
    },
];

/// The parent sizes the ratios are taken at.
pub const RATIO_SIZES: [Size; 2] = [Size::Small, Size::Touched];

fn find<'a>(rows: &'a [LatencyRow], id: &str) -> Option<&'a LatencyRow> {
    rows.iter().find(|r| r.id == id)
}

impl Ratio {
    pub fn value(&self, rows: &[LatencyRow], size: Size) -> Option<f64> {
        let n = find(rows, self.num)?.min(size)?;
        let d = find(rows, self.den)?.min(size)?;
        (d > 0.0).then_some(n / d)
    }
}

/// CPU per spawn of spawnkit's default strategy relative to vfork+exec ("+X %"), per mode.
fn cpu_vs_vfork(rows: &[CpuRow]) -> [Option<f64>; 2] {
    let get = |id: &str| rows.iter().find(|r| r.id == id);
    let (Some(sk), Some(vf)) = (get("spawnkit_clone_vfork"), get("vfork_exec")) else {
        return [None, None];
    };
    let pct = |a: Option<cpu::Cell>, b: Option<cpu::Cell>| Some(cpu::slower_pct(&a?, &b?));
    [pct(sk.plain, vf.plain), pct(sk.captured, vf.captured)]
}

/// spawnkit default ÷ vfork+exec processes per second, per total.
fn throughput_vs_vfork(res: &Results) -> Vec<(usize, f64)> {
    let get = |id: &str| res.throughput.iter().find(|r| r.id == id);
    let (Some(sk), Some(vf)) = (get("spawnkit_clone_vfork"), get("vfork_exec")) else {
        return Vec::new();
    };
    sk.points.iter().zip(&vf.points).map(|(a, b)| (a.total, a.mean / b.mean)).collect()
}

fn fmt_us(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn print_latency(o: &mut Text, res: &Results) {
    let c = &res.config;
    writeln!(
        o,
        "== Latency (Josh Triplett, LPC 2022): spawn -> the child's own CLOCK_MONOTONIC, µs"
    );
    writeln!(
        o,
        "   {} runs per row and parent size, rows taking turns in blocks of {}; the child is \
         found through PATH",
        c.runs,
        latency::BLOCK
    );
    let w = 34;
    write!(o, "{:<w$}", "");
    for s in &res.latency_sizes {
        write!(o, " | {:^19}", s.label());
    }
    writeln!(o);
    write!(o, "{:<w$}", "row");
    for _ in &res.latency_sizes {
        write!(o, " | {:>9} {:>9}", "min", "median");
    }
    writeln!(o);
    for row in &res.latency {
        write!(o, "{:<w$}", row.name);
        if let Some(why) = &row.skipped {
            let short: String = why.chars().take(60).collect();
            writeln!(o, " | skipped: {short}");
            continue;
        }
        for s in &res.latency_sizes {
            match row.sizes.get(s) {
                Some(st) => write!(o, " | {:>9} {:>9}", fmt_us(st.min_us), fmt_us(st.median_us)),
                None => write!(o, " | {:>9} {:>9}", "-", "-"),
            }
        }
        writeln!(o);
    }
    writeln!(o);
}

fn print_throughput(o: &mut Text, res: &Results) {
    let c = &res.config;
    writeln!(o, "== Throughput (Gregory P. Smith, CPython PR #99309): processes per second");
    writeln!(
        o,
        "   at most {} alive (2 × cores + 1), {} iterations per total, mean ± stddev",
        c.active, c.iterations
    );
    let w = 34;
    write!(o, "{:<w$}", "row \\ total");
    for t in &c.totals {
        write!(o, " | {t:>14}");
    }
    writeln!(o);
    for row in &res.throughput {
        write!(o, "{:<w$}", row.name);
        for p in &row.points {
            write!(o, " | {:>14}", format!("{:.0} ± {:.0}", p.mean, p.stddev));
        }
        writeln!(o);
    }
    writeln!(o);
}

fn print_cpu(o: &mut Text, res: &Results) {
    writeln!(o, "== CPU (popen_noshell benchmarks): user + system µs per spawn, parent and child");
    writeln!(
        o,
        "   {} spawns per row and mode, rows taking turns in blocks of {}; relative to vfork+exec",
        res.config.cpu_spawns,
        cpu::BLOCK
    );
    let base = res.cpu.iter().find(|r| r.id == "vfork_exec");
    let w = 34;
    writeln!(o, "{:<w$} | {:^32} | {:^32}", "", "stdout to /dev/null", "stdout captured (pipe)");
    writeln!(
        o,
        "{:<w$} | {:>6} {:>6} {:>6} {:>11} | {:>6} {:>6} {:>6} {:>11}",
        "row", "user", "sys", "total", "vs vfork", "user", "sys", "total", "vs vfork"
    );
    for row in &res.cpu {
        write!(o, "{:<w$}", row.name);
        for (cell, b) in
            [(row.plain, base.and_then(|b| b.plain)), (row.captured, base.and_then(|b| b.captured))]
        {
            match cell {
                Some(c) => {
                    let rel = b.map(|b| cpu::slower_pct(&c, &b)).map_or("-".into(), |p| {
                        if row.id == "vfork_exec" {
                            "(base)".to_string()
                        } else {
                            format!("{p:+.0} %")
                        }
                    });
                    write!(
                        o,
                        " | {:>6.1} {:>6.1} {:>6.1} {:>11}",
                        c.user_us,
                        c.sys_us,
                        c.total_us(),
                        rel
                    );
                }
                None => write!(o, " | {:>32}", "- (popen always pipes)"),
            }
        }
        writeln!(o);
    }
    writeln!(o);
}

fn print_fence(o: &mut Text, res: &Results) {
    writeln!(
        o,
        "== Fence: private /tmp + private network (lo up) + user namespace (uid 0 inside), \
         spawn -> the child running, µs"
    );
    writeln!(
        o,
        "   {} runs per row, rows taking turns in blocks of {}; fence cost = the row minus the \
         same launcher without a fence",
        res.config.fence_runs,
        latency::BLOCK
    );
    let w = 34;
    writeln!(
        o,
        "{:<w$} | {:>9} {:>9} | {:>9} {:>9} | cost taken against",
        "row", "min", "median", "cost min", "median"
    );
    let main = fence::ALL.iter().filter_map(|f| res.fence.iter().find(|r| r.fence == *f));
    for row in main {
        write!(o, "{:<w$}", row.fence.name());
        if let Some(why) = &row.skipped {
            let short: String = why.chars().take(90).collect();
            writeln!(o, " | skipped: {short}");
            continue;
        }
        let Some(st) = row.stats else {
            writeln!(o, " | -");
            continue;
        };
        write!(o, " | {:>9} {:>9}", fmt_us(st.min_us), fmt_us(st.median_us));
        match (row.cost(&res.fence), row.fence.base()) {
            (Some((min, med)), Some(base)) => {
                writeln!(o, " | {:>9} {:>9} | {}", fmt_us(min), fmt_us(med), base.name())
            }
            (None, Some(base)) => {
                writeln!(o, " | {:>9} {:>9} | {} (not measured)", "-", "-", base.name())
            }
            (_, None) => writeln!(o, " | {:>9} {:>9} |", "(base)", ""),
        }
    }
    if !res.fence_tools.is_empty() {
        let tools: Vec<String> = res.fence_tools.iter().map(|(t, v)| format!("{t}: {v}")).collect();
        writeln!(o, "   tools: {}", tools.join("; "));
    }
    writeln!(o);
    if res.config.fence_steps {
        print_fence_steps(o, res);
    }
}

/// `--steps`: each fence built one piece at a time, with what each piece adds.
fn print_fence_steps(o: &mut Text, res: &Results) {
    writeln!(o, "== Fence, step by step: each line adds one piece to the line above it, µs");
    let w = 34;
    writeln!(
        o,
        "{:<w$} | {:>9} {:>9} | {:>9} {:>9}",
        "step", "min", "median", "adds min", "median"
    );
    for row in &res.fence {
        write!(o, "{:<w$}", row.fence.step());
        if let Some(why) = &row.skipped {
            let short: String = why.chars().take(90).collect();
            writeln!(o, " | skipped: {short}");
            continue;
        }
        let Some(st) = row.stats else {
            writeln!(o, " | -");
            continue;
        };
        write!(o, " | {:>9} {:>9}", fmt_us(st.min_us), fmt_us(st.median_us));
        match row.added(&res.fence) {
            Some((min, med)) => writeln!(o, " | {:>9} {:>9}", fmt_us(min), fmt_us(med)),
            None => writeln!(o, " |"),
        }
    }
    writeln!(o);
}

/// The fence's cost (minimum) per fenced row, and each as a multiple of spawnkit's.
fn fence_summary(rows: &[FenceRow]) -> Option<String> {
    let cost = |f: fence::Fence| rows.iter().find(|r| r.fence == f)?.cost(rows).map(|c| c.0);
    let sk = cost(fence::Fence::Spawnkit);
    let mut parts = Vec::new();
    for f in [fence::Fence::Spawnkit, fence::Fence::Shell, fence::Fence::Bwrap] {
        let Some(c) = cost(f) else { continue };
        let times = match sk {
            Some(s) if f != fence::Fence::Spawnkit && s > 0.0 => format!(" ({:.1}×)", c / s),
            _ => String::new(),
        };
        parts.push(format!("{} {}{times}", f.short(), fmt_us(c)));
    }
    (!parts.is_empty()).then(|| format!("fence cost (minimum, µs): {}", parts.join(", ")))
}

fn fmt_ratio(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.2}"))
}

/// Every table, the notes, then the ratio lines (always last): the text for stdout.
pub fn render(res: &Results) -> String {
    let mut text = Text::default();
    let o = &mut text;
    let m = &res.machine;
    writeln!(
        o,
        "spawnkit bench ({}): {} cores, {}, kernel {}, glibc {}, {}",
        res.config.preset, m.cores, m.cpu, m.kernel, m.glibc, m.date
    );
    writeln!(o);
    if !res.latency.is_empty() {
        print_latency(o, res);
    }
    if !res.throughput.is_empty() {
        print_throughput(o, res);
    }
    if !res.cpu.is_empty() {
        print_cpu(o, res);
    }
    if !res.fence.is_empty() {
        print_fence(o, res);
    }
    if let Some(ps) = &res.ps {
        super::ps::print(o, ps);
    }
    if let Some(sv) = &res.server {
        print_server(o, sv, res.config.server_runs, res.config.server_iterations);
    }
    if let Some(a) = &res.asyncs {
        print_async(o, a);
    }
    if let Some(m) = &res.mp {
        print_mp(o, m);
    }
    if let Some(w) = &res.worker {
        print_worker(o, w);
    }
    for n in &res.notes {
        writeln!(o, "note: {n}");
    }
    writeln!(o, "({:.0} s)", res.seconds);
    writeln!(o);
    if let Some(line) = fence_summary(&res.fence) {
        writeln!(o, "{line}");
    }
    for line in res.ps.iter().flat_map(super::ps::summary) {
        writeln!(o, "{line}");
    }
    let [plain, captured] = cpu_vs_vfork(&res.cpu);
    if plain.is_some() || captured.is_some() {
        let p = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:+.1} %"));
        writeln!(
            o,
            "CPU per spawn, spawnkit ÷ vfork+exec: {} plain, {} captured (target: within 10 %)",
            p(plain),
            p(captured)
        );
    }
    let tp = throughput_vs_vfork(res);
    if !tp.is_empty() {
        let parts: Vec<String> = tp.iter().map(|(t, r)| format!("{r:.2} at {t}")).collect();
        writeln!(o, "throughput, spawnkit ÷ vfork+exec: {} (target: at least 1)", parts.join(", "));
    }
    if let Some(sv) = &res.server {
        writeln!(o, "spawn server ratios (latency: minimum; CPU: mean; throughput: median):");
        for t in &server::RATIOS {
            writeln!(
                o,
                "  {:<43} {:>5} small parent, {:>5} 1 GiB touched (target: {} {:.2})",
                t.key,
                fmt_ratio(sv.ratio(t.key, Size::Small)),
                fmt_ratio(sv.ratio(t.key, Size::Touched)),
                if t.at_least { "≥" } else { "≤" },
                t.target
            );
        }
        for key in server::FLOORS {
            writeln!(
                o,
                "  {:<43} {:>5} small parent, {:>5} 1 GiB touched",
                key,
                fmt_ratio(sv.ratio(key, Size::Small)),
                fmt_ratio(sv.ratio(key, Size::Touched)),
            );
        }
        if let Some(c) = &sv.connection {
            writeln!(
                o,
                "  {:<43} {:>5.1} µs median, {:.1} min (target: ≤ {:.0} µs)",
                "authentication per connection",
                c.auth.median_us,
                c.auth.min_us,
                server::AUTH_TARGET_US
            );
        }
    }
    if let Some(a) = &res.asyncs {
        writeln!(o, "async ratios, processes per second (tiny child; /bin/true):");
        for (key, num, den, target) in async_spawn::RATIOS {
            writeln!(
                o,
                "  {:<43} {:>5}; {:>5} (target: ≥ {:.1}, tiny child)",
                key,
                fmt_ratio(a.ratio(num, den, 0)),
                fmt_ratio(a.ratio(num, den, 1)),
                target
            );
        }
        // The others (in the JSON's `other_ratios`), both programs on one line.
        for (key, num, den, prog) in async_spawn::OTHER_RATIOS {
            if prog == 0 {
                writeln!(
                    o,
                    "  {:<43} {:>5}; {:>5}",
                    key,
                    fmt_ratio(a.ratio(num, den, 0)),
                    fmt_ratio(a.ratio(num, den, 1)),
                );
            }
        }
    }
    if let Some(m) = &res.mp {
        let at = m.ratio_total().map_or("-".into(), |t| t.to_string());
        writeln!(o, "multiprocessing ratios, processes per second at total {at}:");
        for (key, num, den, [t_small, t_touched]) in mp::RATIOS {
            writeln!(
                o,
                "  {:<43} {:>5} small parent, {:>5} 1 GiB touched (target: ≥ {:.1}, ≥ {:.1})",
                key,
                fmt_ratio(m.ratio(num, den, Size::Small)),
                fmt_ratio(m.ratio(num, den, Size::Touched)),
                t_small,
                t_touched
            );
        }
    }
    if let Some(w) = &res.worker {
        for line in worker_summary(w) {
            writeln!(o, "{line}");
        }
    }
    if !res.latency.is_empty() {
        writeln!(o, "minimum latency ratios (spawnkit default strategy = clone-vfork):");
        for r in &RATIOS {
            writeln!(
                o,
                "  {:<31} {:>5} small parent, {:>5} 1 GiB touched (target: ≤ {:.2})",
                r.key,
                fmt_ratio(r.value(&res.latency, Size::Small)),
                fmt_ratio(r.value(&res.latency, Size::Touched)),
                r.target
            );
        }
    }
    text.0
}

fn stats_json(row: &LatencyRow) -> Value {
    let mut sizes = Map::new();
    for (size, s) in &row.sizes {
        sizes.insert(
            size.key().into(),
            json!({"min_us": s.min_us, "median_us": s.median_us, "mean_us": s.mean_us, "runs": s.runs}),
        );
    }
    Value::Object(sizes)
}

fn cell_json(c: Option<cpu::Cell>, base: Option<cpu::Cell>) -> Value {
    match c {
        None => Value::Null,
        Some(c) => json!({
            "user_us": c.user_us,
            "sys_us": c.sys_us,
            "total_us": c.total_us(),
            "spawns": c.spawns,
            "slower_than_vfork_pct": base.map(|b| cpu::slower_pct(&c, &b)),
        }),
    }
}

/// Everything as one JSON object; `ratios` holds the three minimum-latency ratios at "0" and
/// "1GiB-touched" (null where a row was not measured).
pub fn json(res: &Results) -> Value {
    let m = &res.machine;
    let c = &res.config;
    let latency: Vec<Value> = res
        .latency
        .iter()
        .map(|r| {
            json!({"id": r.id, "name": r.name, "kind": r.kind, "sizes": stats_json(r),
                   "skipped": r.skipped})
        })
        .collect();
    let throughput: Vec<Value> = res
        .throughput
        .iter()
        .map(|r| {
            let points: Vec<Value> = r
                .points
                .iter()
                .map(|p| {
                    json!({"total": p.total, "mean_per_s": p.mean, "stddev_per_s": p.stddev,
                           "samples_per_s": p.samples})
                })
                .collect();
            json!({"id": r.id, "name": r.name, "kind": r.kind, "points": points})
        })
        .collect();
    let base = res.cpu.iter().find(|r| r.id == "vfork_exec");
    let cpu: Vec<Value> = res
        .cpu
        .iter()
        .map(|r| {
            json!({"id": r.id, "name": r.name, "kind": r.kind,
                   "plain": cell_json(r.plain, base.and_then(|b| b.plain)),
                   "captured": cell_json(r.captured, base.and_then(|b| b.captured))})
        })
        .collect();
    let fence: Vec<Value> = res
        .fence
        .iter()
        .map(|r| {
            let cost = r.cost(&res.fence);
            let steps = res.config.fence_steps;
            let previous = r.fence.previous().filter(|_| steps);
            let added = previous.and_then(|_| r.added(&res.fence));
            json!({"id": r.fence.id(), "name": r.fence.name(), "kind": r.fence.kind(),
                   "command": r.command,
                   "min_us": r.stats.map(|s| s.min_us),
                   "median_us": r.stats.map(|s| s.median_us),
                   "mean_us": r.stats.map(|s| s.mean_us),
                   "runs": r.stats.map_or(0, |s| s.runs),
                   "base": r.fence.base().map(|b| b.id()),
                   "fence_cost_min_us": cost.map(|c| c.0),
                   "fence_cost_median_us": cost.map(|c| c.1),
                   "previous": previous.map(|p| p.id()),
                   "added_min_us": added.map(|a| a.0),
                   "added_median_us": added.map(|a| a.1),
                   "skipped": r.skipped})
        })
        .collect();
    let tools: Map<String, Value> =
        res.fence_tools.iter().map(|(t, v)| (t.clone(), json!(v))).collect();
    let mut ratios = Map::new();
    for r in &RATIOS {
        let mut per = Map::new();
        for s in RATIO_SIZES {
            per.insert(s.key().into(), json!(r.value(&res.latency, s)));
        }
        ratios.insert(r.key.into(), Value::Object(per));
    }
    let mut other = Map::new();
    if let Some(sv) = &res.server {
        for t in &server::RATIOS {
            let mut per = Map::new();
            for s in server::SIZES {
                per.insert(s.key().into(), json!(sv.ratio(t.key, s)));
            }
            ratios.insert(t.key.into(), Value::Object(per));
        }
        for key in server::FLOORS {
            let mut per = Map::new();
            for s in server::SIZES {
                per.insert(s.key().into(), json!(sv.ratio(key, s)));
            }
            other.insert(key.into(), Value::Object(per));
        }
    }
    if let Some(a) = &res.asyncs {
        for (key, num, den, _) in async_spawn::RATIOS {
            ratios.insert(key.into(), json!(a.ratio(num, den, 0)));
        }
        for (key, num, den, prog) in async_spawn::OTHER_RATIOS {
            other.insert(key.into(), json!(a.ratio(num, den, prog)));
        }
    }
    if let Some(m) = &res.mp {
        for (key, num, den, _) in mp::RATIOS {
            let mut per = Map::new();
            for s in mp::SIZES {
                per.insert(s.key().into(), json!(m.ratio(num, den, s)));
            }
            ratios.insert(key.into(), Value::Object(per));
        }
    }
    if let Some(w) = &res.worker {
        ratios.insert("worker_fence/bwrap".into(), json!(w.fence_ratio(false)));
        other.insert("worker_fence/bwrap, minimum".into(), json!(w.fence_ratio(true)));
        other.insert("worker_fenced_launch/bwrap_launch".into(), json!(w.total_ratio()));
    }
    let [plain, captured] = cpu_vs_vfork(&res.cpu);
    other.insert("cpu spawnkit/vfork pct".into(), json!({"plain": plain, "captured": captured}));
    let tp: Map<String, Value> =
        throughput_vs_vfork(res).into_iter().map(|(t, r)| (t.to_string(), json!(r))).collect();
    other.insert("throughput spawnkit/vfork".into(), Value::Object(tp));
    json!({
        "machine": {"date": m.date, "kernel": m.kernel, "cpu": m.cpu, "cores": m.cores,
                    "glibc": m.glibc,
                    "python": res.python.as_ref().map(|p| json!({"version": p.version,
                                                                "executable": p.executable}))},
        "config": {"preset": c.preset, "runs": c.runs, "fork_touched_runs": c.fork_touched_runs,
                   "latency_block": latency::BLOCK, "cpu_block": cpu::BLOCK,
                   "totals": c.totals, "iterations": c.iterations, "active": c.active,
                   "cpu_spawns": c.cpu_spawns, "fence_runs": c.fence_runs,
                   "ps_procs": c.ps_procs, "ps_runs": c.ps_runs, "ps_mem_runs": c.ps_mem_runs,
                   "server_runs": c.server_runs, "server_iterations": c.server_iterations,
                   "server_tp_spawns": c.server_tp_spawns, "forkserver_runs": c.forkserver_runs,
                   "async_rounds": c.async_rounds, "async_total": c.async_total,
                   "mp_totals": c.mp_totals, "mp_iterations": c.mp_iterations,
                   "worker_actions": c.worker_actions, "worker_fence_runs": c.worker_fence_runs},
        "seconds": res.seconds,
        "latency": {"unit": "µs", "parent_sizes": res.latency_sizes.iter().map(|s| s.key()).collect::<Vec<_>>(),
                    "rows": latency},
        "throughput": {"unit": "processes/s", "rows": throughput},
        "cpu": {"unit": "µs per spawn", "rows": cpu},
        "fence": {"unit": "µs", "runs": c.fence_runs, "block": latency::BLOCK,
                  "steps": c.fence_steps,
                  "measures": "spawn -> the tiny child running (its own CLOCK_MONOTONIC)",
                  "fence": "user namespace (caller = uid 0), mount namespace with a tmpfs on /tmp, \
                            network namespace with lo up",
                  "fence_cost": "min_us/median_us minus those of the row named by base \
                                 (the same launcher without a fence)",
                  "tools": tools, "rows": fence},
        "ps": res.ps.as_ref().map(super::ps::json),
        "notes": res.notes,
        "server": res.server.as_ref().map(server_json),
        "async": res.asyncs.as_ref().map(async_json),
        "mp": res.mp.as_ref().map(mp_json),
        "worker": res.worker.as_ref().map(worker_json),
        "ratios": ratios,
        "other_ratios": other,
        "ratios_doc": {
            "server/vfork": "minimum latency (request -> the child's first instruction), the \
                             private server's over vfork+exec's, at each parent size",
            "server_caller_cpu/vfork_cpu": "the calling thread's CPU per spawn+wait (its \
                CPU clock, CLOCK_THREAD_CPUTIME_ID, mean): the server's status requests \
                (Client::submit_status_many: spawn and wait, the server holds the pidfds and \
                answers with how each child ended), 16 in flight in one message, over \
                vfork+exec",
            "server_caller_cpu_children/vfork_cpu": "in other_ratios: the same through \
                Child handles (Client::submit_many, receive, wait: a pidfd per child handed \
                over and read here), 16 in flight in one message",
            "server_throughput_1thread/vfork_throughput": "spawns per second from one thread \
                (median of samples): the server with up to 16 in flight over a vfork+exec \
                spawn-and-wait loop",
            "py_server/py_local": "minimum latency of spawnkit.subprocess.Popen through a \
                private spawnkit.Server over the local one",
            "py_server_cpu/py_local_cpu": "the calling thread's CPU per Popen+wait, through \
                the server over local",
            "async_spawnkit/tokio": "processes per second, 1,000 tiny children with at most 64 \
                running: spawnkit's tokio face over tokio::process (current-thread runtime)",
            "asyncio_spawnkit/asyncio": "processes per second, the same: spawnkit.asyncio over \
                asyncio's default child watcher",
            "mp_spawnkit/mp_fork": "Smith's method (at most 2 x CPUs + 1 alive, a no-op \
                target): processes per second (mean) of multiprocessing's spawnkit start method \
                over fork's, at the largest total measured (mp.ratio_total), per parent size",
            "mp_spawnkit/mp_forkserver": "the same, spawnkit over forkserver",
            "worker_fence/bwrap": "the price of `spawnkit worker`'s fence (private network, \
                tmpfs on /tmp, pid namespace; /bin/true spawn -> exit, median, minus the same \
                spawn without a fence) over bubblewrap's (bwrap --unshare-net --unshare-pid \
                --tmpfs /tmp --dev-bind / / /bin/true, started the same way, minus the same)",
            "server_caller_cpu_batch_max/vfork_cpu": "in other_ratios: the same as \
                server_caller_cpu_children/vfork_cpu with 64 requests per message (a \
                SpawnMany frame's most), the batch the API allows",
            "latency: server/local": "in other_ratios: minimum latency through the private \
                server over spawnkit's local spawn (what the server adds to it)",
            "latency: local/vfork": "in other_ratios: minimum latency of spawnkit's local \
                spawn over vfork+exec (server/vfork is the product of the two)",
            "floor: ...": "in other_ratios: what a socketpair round trip with no spawn costs \
                beside vfork+exec, the floor under the server ratios; the latency of a minimal \
                pooled spawn server in C (bench/floor_server.c) over vfork+exec, the design \
                under server/vfork, alone and plus a Rust caller's copy of its environment \
                (std::env::vars_os, timed alone: floor_env_copy); and a local \
                spawnkit.subprocess Popen+wait without its spawn call (Command.spawn_child, \
                timed alone) plus that round trip's CPU, over the whole local Popen+wait: the \
                floor under py_server_cpu/py_local_cpu",
        },
    })
}

fn per_size_json(values: &std::collections::BTreeMap<Size, f64>) -> Value {
    Value::Object(values.iter().map(|(s, v)| (s.key().to_string(), json!(v))).collect())
}

/// The pinned floor rows of the server tables: (name, across two CPUs).
const PINNED_FLOORS: [(&str, bool); 2] = [
    ("floor: the round trip, both on one CPU", false),
    ("floor: the round trip across two CPUs", true),
];

fn server_json(sv: &ServerResults) -> Value {
    let lat = |rows: &[LatencyRow]| -> Vec<Value> {
        rows.iter()
            .map(|r| {
                json!({"id": r.id, "name": r.name, "kind": r.kind, "sizes": stats_json(r),
                       "skipped": r.skipped})
            })
            .collect()
    };
    let values = |rows: &[server::ValueRow]| -> Vec<Value> {
        rows.iter()
            .map(|r| json!({"id": r.id, "name": r.name, "sizes": per_size_json(&r.values)}))
            .collect()
    };
    let floor: Map<String, Value> = sv
        .floor
        .iter()
        .map(|(s, (st, cpu))| {
            (
                s.key().to_string(),
                json!({"min_us": st.min_us, "median_us": st.median_us,
                                         "caller_cpu_us": cpu, "runs": st.runs}),
            )
        })
        .collect();
    json!({
        "server": "a private spawnkit::PrivateServer forked by the benchmark first thing \
                   (before any ballast or thread); not spawnkit serve",
        "server_pid": sv.server_pid,
        "parent_sizes": server::SIZES.iter().map(|s| s.key()).collect::<Vec<_>>(),
        "in_flight": server::IN_FLIGHT,
        "latency": {"unit": "µs", "measures": "request -> the tiny child's own CLOCK_MONOTONIC \
                    (Triplett's method); rows take turns in blocks of 10",
                    "rows": lat(&sv.latency)},
        "caller_cpu": {"unit": "µs per spawn", "measures": "CLOCK_THREAD_CPUTIME_ID of the \
                       calling thread around spawn + wait: the server 16 submitted, then \
                       received, then waited (spawnkit_server_status: 16 status requests \
                       submitted, then their 16 statuses received); the others one at a time; \
                       Python: Popen + wait",
                       "rows": values(&sv.cpu)},
        "throughput": {"unit": "spawns/s", "spawns_per_sample": sv.tp_spawns,
                       "measures": "one calling thread, median of the samples: the server with \
                                    up to 16 requests in flight or children unwaited; the \
                                    others spawn, wait, repeat",
                       "rows": values(&sv.throughput)},
        "floor_socket_round_trip": {"measures": "a 512-byte write and a 64-byte reply over a \
                                     Unix socketpair to a thread answering at once (no fds, \
                                     no spawn)", "sizes": floor},
        "floor_env_copy": {
            "measures": "std::env::vars_os().collect() and its drop, timed alone: what a Rust \
                         caller pays to copy its environment, safely, before it can send it \
                         (the minimal pooled server's C client reads environ unlocked)",
            "sizes": sv.env_copy.iter().map(|(s, st)| (s.key().to_string(),
                json!({"min_us": st.min_us, "median_us": st.median_us, "runs": st.runs})))
                .collect::<Map<String, Value>>(),
        },
        "floor_batch_kernel": {
            "measures": "the caller's CPU per child (µs) for 16 requests in one message with \
                         no library: a 2 KiB request written, one answer carrying 16 pidfds \
                         read, each child's exit status read from its pidfd \
                         (PIDFD_GET_INFO) and the pidfd closed; answered by a thread held to \
                         another CPU that spawns, opens, reaps",
            "sizes": per_size_json(&sv.floor_batch),
        },
        "floor_socket_round_trip_pinned": {
            "measures": "the same round trip with both threads held to one CPU (same_cpu) and \
                         to two (across_cpus): a wake-up on the waker's CPU and one that \
                         crosses to another",
            "cpus": sv.floor_pinned.values().next().map(|p| [p.cpus.0, p.cpus.1]),
            "sizes": sv.floor_pinned.iter().map(|(s, p)| {
                let one = |(st, cpu): &(latency::Stats, f64)| json!({"min_us": st.min_us,
                    "median_us": st.median_us, "caller_cpu_us": cpu, "runs": st.runs});
                (s.key().to_string(), json!({"same_cpu": one(&p.same),
                                             "across_cpus": one(&p.across)}))
            }).collect::<Map<String, Value>>(),
        },
        "connection": sv.connection.as_ref().map(|c| {
            let row = |st: &latency::Stats, caller: f64, server: Option<f64>| {
                json!({"min_us": st.min_us, "median_us": st.median_us, "mean_us": st.mean_us,
                       "runs": st.runs, "caller_cpu_us": caller, "server_cpu_us": server})
            };
            json!({
                "measures": "a connection's cost before its first request, against a server \
                             made by Server::bind (a socket and a key file, as spawnkit serve) \
                             on a thread of the benchmark; rows take turns in blocks of 10",
                "connect": row(&c.connect, c.caller_cpu_us.0, c.server_cpu_us.map(|s| s.0)),
                "auth": row(&c.auth, c.caller_cpu_us.1, c.server_cpu_us.map(|s| s.1)),
                "auth_target_us": server::AUTH_TARGET_US,
                "auth_within_target": c.auth.median_us <= server::AUTH_TARGET_US,
            })
        }),
        "forkserver": sv.forkserver.as_ref().map(|r| json!({"id": r.id, "name": r.name,
            "measures": "multiprocessing forkserver: Process(target=noop).start() + join(), µs",
            "sizes": stats_json(r), "skipped": r.skipped})),
        "python": sv.python_version,
    })
}

fn async_json(a: &AsyncResults) -> Value {
    let cell = |c: &Option<async_spawn::Cell>| {
        c.map(|c| {
            // A floor row has no loop: no stall, no thread count (null).
            let floor = c.stall_ms.is_nan();
            json!({"wall_s": c.wall_s, "per_s": c.per_s,
                   "longest_stall_ms": (!floor).then_some(c.stall_ms),
                   "threads_created": (!floor).then_some(c.threads)})
        })
    };
    let rows: Vec<Value> = a
        .rows
        .iter()
        .map(|r| {
            json!({"id": r.id, "name": r.name, "kind": r.kind,
                   "tiny": cell(&r.cells[0]), "bin_true": cell(&r.cells[1]),
                   "skipped": r.skipped})
        })
        .collect();
    json!({
        "total": a.total, "limit": a.limit, "rounds": a.rounds,
        "programs": {"tiny": "the benchmark's tiny static child", "bin_true": async_spawn::TRUE},
        "tokio_runtime": "current-thread (a fresh one per round)",
        "measures": "wall: the fastest round; per_s = total / wall; longest_stall_ms: the \
                     largest gap between two ticks of a 1 ms timer on the same loop minus 1 ms \
                     (the smallest over rounds; tokio's timer has 1 ms granularity); \
                     threads_created: the most threads seen while spawning minus those before",
        "python": a.python_version,
        "rows": rows,
    })
}

fn mp_json(m: &MpResults) -> Value {
    let rows: Vec<Value> = m
        .rows
        .iter()
        .map(|r| {
            let per_s: Map<String, Value> = r
                .per_s
                .iter()
                .map(|(s, points)| {
                    let p: Vec<Value> = points
                        .iter()
                        .map(|p| json!({"total": p.total, "mean": p.mean, "sd": p.sd}))
                        .collect();
                    (s.key().to_string(), Value::Array(p))
                })
                .collect();
            json!({"id": r.id, "name": r.name, "per_s": per_s,
                   "first_map_s": per_size_json(&r.first_map_s), "skipped": r.skipped})
        })
        .collect();
    json!({
        "method": "Gregory P. Smith's (CPython PR #99309), bench/python_mp.py",
        "measures": "per_s: start `total` multiprocessing Processes running a no-op, at most \
                     `alive` at once (joining the oldest when full), processes per second, mean \
                     and sd over `iterations` (methods taking turns); first_map_s: seconds from \
                     creating a 4-worker Pool to its map's first result, the best of \
                     `iterations`; from the script's process as it starts (\"0\") and holding a \
                     1 GiB bytearray with every page written (\"1GiB-touched\")",
        "unit": "processes/s",
        "totals": m.totals, "iterations": m.iterations, "alive": m.alive,
        "parent_sizes": mp::SIZES.iter().map(|s| s.key()).collect::<Vec<_>>(),
        "ratio_total": m.ratio_total(),
        "python": m.python_version,
        "rows": rows,
    })
}

fn print_mp(o: &mut Text, m: &MpResults) {
    writeln!(
        o,
        "== Multiprocessing start methods (Smith's method): processes per second, mean ± sd"
    );
    writeln!(
        o,
        "   at most {} alive (2 × CPUs + 1), {} iterations per total, a no-op target; Python {}",
        m.alive.map_or("?".into(), |a| a.to_string()),
        m.iterations,
        m.python_version.as_deref().unwrap_or("?")
    );
    let w = 44;
    for size in mp::SIZES {
        writeln!(o, "-- parent: {}", size.label());
        write!(o, "{:<w$}", "start method \\ total");
        for t in &m.totals {
            write!(o, " | {t:>14}");
        }
        writeln!(o, " | {:>14}", "Pool first map");
        for row in &m.rows {
            write!(o, "{:<w$}", row.name);
            if let Some(why) = &row.skipped {
                let short: String = why.chars().take(70).collect();
                writeln!(o, " | skipped: {short}");
                continue;
            }
            let points = row.per_s.get(&size);
            for t in &m.totals {
                match points.and_then(|ps| ps.iter().find(|p| p.total == *t)) {
                    Some(p) => write!(o, " | {:>14}", format!("{:.0} ± {:.0}", p.mean, p.sd)),
                    None => write!(o, " | {:>14}", "-"),
                }
            }
            match row.first_map_s.get(&size) {
                Some(f) => writeln!(o, " | {:>11.1} ms", f * 1e3),
                None => writeln!(o, " | {:>14}", "-"),
            }
        }
    }
    writeln!(o);
}

fn print_server(o: &mut Text, sv: &ServerResults, runs: usize, iterations: usize) {
    let sizes = server::SIZES;
    writeln!(
        o,
        "== Spawn server (a private server forked first, pid {}): request -> the child's first \
         instruction, µs",
        sv.server_pid
    );
    writeln!(
        o,
        "   {runs} runs per row and parent size, rows taking turns in blocks of {}",
        server::BLOCK
    );
    let w = 44;
    write!(o, "{:<w$}", "row");
    for s in sizes {
        write!(o, " | {:^19}", s.label());
    }
    writeln!(o);
    let mut lat_rows: Vec<&LatencyRow> = sv.latency.iter().collect();
    lat_rows.extend(sv.forkserver.iter());
    for row in lat_rows {
        write!(o, "{:<w$}", row.name);
        if let Some(why) = &row.skipped {
            let short: String = why.chars().take(60).collect();
            writeln!(o, " | skipped: {short}");
            continue;
        }
        for s in sizes {
            match row.sizes.get(&s) {
                Some(st) => write!(o, " | {:>9} {:>9}", fmt_us(st.min_us), fmt_us(st.median_us)),
                None => write!(o, " | {:>9} {:>9}", "-", "-"),
            }
        }
        writeln!(o);
    }
    write!(o, "{:<w$}", "floor: socketpair round trip (no spawn)");
    for s in sizes {
        match sv.floor.get(&s) {
            Some((st, _)) => write!(o, " | {:>9} {:>9}", fmt_us(st.min_us), fmt_us(st.median_us)),
            None => write!(o, " | {:>9} {:>9}", "-", "-"),
        }
    }
    writeln!(o);
    for (name, across) in PINNED_FLOORS {
        write!(o, "{:<w$}", name);
        for s in sizes {
            match sv.floor_pinned.get(&s).map(|p| if across { &p.across } else { &p.same }) {
                Some((st, _)) => {
                    write!(o, " | {:>9} {:>9}", fmt_us(st.min_us), fmt_us(st.median_us))
                }
                None => write!(o, " | {:>9} {:>9}", "-", "-"),
            }
        }
        writeln!(o);
    }
    write!(o, "{:<w$}", "floor: Rust's environment copy (vars_os)");
    for s in sizes {
        match sv.env_copy.get(&s) {
            Some(st) => write!(o, " | {:>9} {:>9}", fmt_us(st.min_us), fmt_us(st.median_us)),
            None => write!(o, " | {:>9} {:>9}", "-", "-"),
        }
    }
    writeln!(o);
    writeln!(o, "   (min, median; the forkserver row: Process(no-op).start() + join())");
    writeln!(o);
    writeln!(o, "== Spawn server: the calling thread's CPU per spawn + wait (its CPU clock), µs");
    writeln!(
        o,
        "   the server: {} (or {}) requests submitted in one message, then received, then waited for (status: answered with how each ended); the others one at a time",
        server::IN_FLIGHT,
        server::BATCH_MAX
    );
    write!(o, "{:<w$}", "row");
    for s in sizes {
        write!(o, " | {:>19}", s.label());
    }
    writeln!(o);
    for row in &sv.cpu {
        write!(o, "{:<w$}", row.name);
        for s in sizes {
            write!(o, " | {:>19}", row.values.get(&s).map_or("-".into(), |v| format!("{v:.1}")));
        }
        writeln!(o);
    }
    write!(o, "{:<w$}", "floor: socketpair round trip (no spawn)");
    for s in sizes {
        write!(o, " | {:>19}", sv.floor.get(&s).map_or("-".into(), |f| format!("{:.1}", f.1)));
    }
    writeln!(o);
    for (name, across) in PINNED_FLOORS {
        write!(o, "{:<w$}", name);
        for s in sizes {
            let cpu = sv.floor_pinned.get(&s).map(|p| if across { p.across.1 } else { p.same.1 });
            write!(o, " | {:>19}", cpu.map_or("-".into(), |c| format!("{c:.1}")));
        }
        writeln!(o);
    }
    write!(o, "{:<w$}", "floor: 16 per message, the kernel's part");
    for s in sizes {
        let cpu = sv.floor_batch.get(&s);
        write!(o, " | {:>19}", cpu.map_or("-".into(), |c| format!("{c:.1}")));
    }
    writeln!(o);
    writeln!(o);
    writeln!(
        o,
        "== Spawn server: spawns per second from one calling thread (median of {iterations} samples of {})",
        sv.tp_spawns
    );
    write!(o, "{:<w$}", "row");
    for s in sizes {
        write!(o, " | {:>19}", s.label());
    }
    writeln!(o);
    for row in &sv.throughput {
        write!(o, "{:<w$}", row.name);
        for s in sizes {
            write!(o, " | {:>19}", row.values.get(&s).map_or("-".into(), |v| format!("{v:.0}")));
        }
        writeln!(o);
    }
    writeln!(o);
    if let Some(c) = &sv.connection {
        writeln!(
            o,
            "== Spawn server: a connection before its first request (a Server::bind socket, served on a thread), µs"
        );
        writeln!(
            o,
            "{:<w$} | {:>9} {:>9} | {:>10} | {:>10}",
            "row", "min", "median", "caller CPU", "server CPU"
        );
        let server_cpu = |i: usize| {
            c.server_cpu_us.map_or("-".into(), |s| format!("{:.1}", if i == 0 { s.0 } else { s.1 }))
        };
        for (i, (name, st, cpu)) in [
            ("connect(2) alone", &c.connect, c.caller_cpu_us.0),
            ("connect + uid check + mutual HMAC", &c.auth, c.caller_cpu_us.1),
        ]
        .into_iter()
        .enumerate()
        {
            writeln!(
                o,
                "{:<w$} | {:>9.1} {:>9.1} | {:>10.1} | {:>10}",
                name,
                st.min_us,
                st.median_us,
                cpu,
                server_cpu(i)
            );
        }
        writeln!(o);
    }
}

fn print_async(o: &mut Text, a: &AsyncResults) {
    writeln!(
        o,
        "== Async: {} processes, at most {} running, from one event loop; best of {} rounds",
        a.total, a.limit, a.rounds
    );
    writeln!(
        o,
        "   per program: processes/s, the loop's longest stall (1 ms timer), threads created"
    );
    let w = 50;
    writeln!(o, "{:<w$} | {:^26} | {:^26}", "", "tiny child", async_spawn::TRUE);
    writeln!(
        o,
        "{:<w$} | {:>8} {:>9} {:>7} | {:>8} {:>9} {:>7}",
        "row", "proc/s", "stall ms", "threads", "proc/s", "stall ms", "threads"
    );
    for row in &a.rows {
        write!(o, "{:<w$}", row.name);
        if row.cells.iter().all(Option::is_none) {
            let why = row.skipped.as_deref().unwrap_or("not measured");
            let short: String = why.chars().take(70).collect();
            writeln!(o, " | skipped: {short}");
            continue;
        }
        for c in &row.cells {
            match c {
                Some(c) if c.stall_ms.is_nan() => {
                    write!(o, " | {:>8.0} {:>9} {:>7}", c.per_s, "-", "-")
                }
                Some(c) => {
                    write!(o, " | {:>8.0} {:>9.2} {:>7}", c.per_s, c.stall_ms, c.threads)
                }
                None => write!(o, " | {:>26}", "-"),
            }
        }
        writeln!(o);
    }
    writeln!(o);
}

fn ms(us: Option<f64>) -> String {
    us.map_or("-".into(), |v| format!("{:.2}", v / 1e3))
}

fn print_worker(o: &mut Text, w: &WorkerResults) {
    let info = &w.farm_info;
    writeln!(
        o,
        "== Remote-execution worker: {} actions per row through BuildGrid ({}), two spawnkit \
         workers × concurrency 2",
        w.actions,
        info["buildgrid"]
            .as_str()
            .unwrap_or("buildgrid")
            .trim_start_matches("buildgrid[database]==")
    );
    writeln!(
        o,
        "   own time = lease received -> result sent, minus the command's run time (--stats-file)"
    );
    let wd = 48;
    writeln!(
        o,
        "{:<wd$} | {:>9} | {:>11} | {:>8} | {:>13} | {:>8} | {:>9} | {:>9} | {:>9} | {:>9} | {:>8} | {:>6}",
        "row",
        "actions/s",
        "own ms p50",
        "own p90",
        "own-server ms",
        "floor ms",
        "CAS probe",
        "fetch ms",
        "exec ms",
        "upload ms",
        "span ms",
        "CPU ms"
    );
    for r in &w.farm {
        let name = format!(
            "--fence {}, {}",
            r.fence,
            if r.input_files == 0 {
                "/bin/true".into()
            } else {
                format!("{} input files", r.input_files)
            }
        );
        let name =
            if r.id.ends_with("_one_at_a_time") { format!("{name}, 1 at a time") } else { name };
        let name = if r.id.starts_with("split_cas_") { format!("{name}, CAS apart") } else { name };
        write!(o, "{name:<wd$}");
        if let Some(why) = &r.skipped {
            let short: String = why.chars().take(90).collect();
            writeln!(o, " | skipped: {short}");
            continue;
        }
        let ph = |k: &str| r.raw["phases_ms"][k].as_f64().map_or("-".into(), |v| format!("{v:.2}"));
        writeln!(
            o,
            " | {:>9} | {:>11} | {:>8} | {:>13} | {:>8} | {:>9} | {:>9} | {:>9} | {:>9} | {:>8} | {:>6}",
            r.actions_per_s.map_or("-".into(), |v| format!("{v:.1}")),
            ms(r.own_median_us),
            ms(r.own_p90_us),
            ms(r.own_excl_server_median_us),
            ms(r.floor_us),
            ms(r.cas_probe_us),
            ph("input_fetch"),
            ph("execution"),
            ph("output_upload"),
            ph("action_span"),
            r.raw["worker_cpu_ms_per_action"].as_f64().map_or("-".into(), |v| format!("{v:.2}"))
        );
    }
    writeln!(
        o,
        "   fetch/exec/upload/span: medians of the worker's ExecutedActionMetadata stamps (span: \
         input fetch start -> upload done); own - (span - exec) = the Bots round trips; CPU: the \
         workers' own CPU time (user + system, not the commands') per action"
    );
    writeln!(
        o,
        "   own-server: median of own time minus the action's waits on BuildGrid (its CAS calls; \
         result whole -> end of the UpdateBotSession in flight); floor: (CAS calls + 1 report) × \
         one trivial round trip"
    );
    writeln!(
        o,
        "   CAS probe: median answer to a BatchReadBlobs of one small blob, sent every 20 ms by a \
         client beside the workers while the row loads the farm; CAS apart: the CAS in a \
         BuildGrid process of its own (worker --remote-cas), on a second farm"
    );
    for (key, which) in [("floor", "this BuildGrid"), ("split_cas_floor", "the CAS apart")] {
        let f = &info[key];
        if let Some(rtt) = f["rtt_ms"].as_f64() {
            let m =
                |k: &str| f["rtt_ms_median"][k].as_f64().map_or("-".into(), |v| format!("{v:.2}"));
            writeln!(
                o,
                "   floor: one trivial round trip to {which}, median of {} from Python gRPC: \
                 {rtt:.2} ms (GetCapabilities {}, FindMissingBlobs [] {}, BatchReadBlobs 1 blob \
                 {} ms)",
                f["calls"].as_u64().unwrap_or(0),
                m("get_capabilities"),
                m("find_missing_blobs_empty"),
                m("batch_read_blobs_1"),
            );
        } else if let Some(why) = f["skipped"].as_str() {
            let short: String = why.chars().take(90).collect();
            writeln!(o, "   floor ({which}): skipped: {short}");
        }
    }
    writeln!(o);
    writeln!(
        o,
        "== The worker's fence beside bubblewrap's: /bin/true spawn -> exit, µs ({} runs per row)",
        w.fence_runs
    );
    let wd = 46;
    writeln!(
        o,
        "{:<wd$} | {:>9} | {:>9} | {:>9} | {:>14}",
        "row", "min", "median", "p90", "price (median)"
    );
    for r in &w.fence {
        write!(o, "{:<wd$}", r.row.name());
        let Some(d) = r.dist else {
            let why = r.skipped.as_deref().unwrap_or("not measured");
            let short: String = why.chars().take(80).collect();
            writeln!(o, " | skipped: {short}");
            continue;
        };
        let price = w.price(r.row).filter(|_| r.row != worker::FenceRow::Plain);
        writeln!(
            o,
            " | {:>9} | {:>9} | {:>9} | {:>14}",
            fmt_us(d.min_us),
            fmt_us(d.median_us),
            fmt_us(d.p90_us),
            price.map_or("-".into(), |p| fmt_us(p.1))
        );
    }
    if let Some(v) = &w.bwrap_version {
        writeln!(o, "   {v}; bwrap {}", worker::BWRAP_ARGS.join(" "));
    }
    writeln!(o);
}

/// The closing lines: the targets of issue 16.
fn worker_summary(w: &WorkerResults) -> Vec<String> {
    let own = w.farm_row("fenced_true").and_then(|r| r.own_median_us);
    let own10 = w.farm_row("fenced_10_files").and_then(|r| r.own_median_us);
    let excl = w.farm_row("fenced_true").and_then(|r| r.own_excl_server_median_us);
    let excl10 = w.farm_row("fenced_10_files").and_then(|r| r.own_excl_server_median_us);
    let floor = w.farm_row("fenced_true").and_then(|r| r.floor_us);
    let floor10 = w.farm_row("fenced_10_files").and_then(|r| r.floor_us);
    let serial = w.farm_row("fenced_true_one_at_a_time");
    let probe = w.farm_row("fenced_true").and_then(|r| r.cas_probe_us);
    let split = w.farm_row("split_cas_fenced_true");
    let split_serial = w.farm_row("split_cas_fenced_true_one_at_a_time");
    let failed: Vec<String> = w
        .farm
        .iter()
        .filter_map(|r| {
            let n = r.raw["failed_attempts"].as_u64().filter(|&n| n > 0)?;
            Some(format!("{} in {}", n, r.id))
        })
        .collect();
    let mut lines = vec![
        format!(
            "worker's own time per fenced action, median: {} ms /bin/true, {} ms 10 input files \
             (target: ≤ 2 ms)",
            ms(own),
            ms(own10)
        ),
        format!(
            "  excluding its waits on BuildGrid: {} ms, {} ms; BuildGrid's round-trip floor under \
             it: {} ms, {} ms",
            ms(excl),
            ms(excl10),
            ms(floor),
            ms(floor10)
        ),
        format!(
            "  one action at a time (BuildGrid otherwise idle), /bin/true: {} ms, {} ms \
             excluding its waits",
            ms(serial.and_then(|r| r.own_median_us)),
            ms(serial.and_then(|r| r.own_excl_server_median_us)),
        ),
        format!(
            "  under the same load, a trivial CAS read by another client took {} ms (the farm's \
             answer time, not the worker's)",
            ms(probe)
        ),
        format!(
            "  the CAS apart (--remote-cas): {} ms loaded (probe {} ms, {} ms excluding its waits), \
             {} ms one at a time",
            ms(split.and_then(|r| r.own_median_us)),
            ms(split.and_then(|r| r.cas_probe_us)),
            ms(split.and_then(|r| r.own_excl_server_median_us)),
            ms(split_serial.and_then(|r| r.own_median_us)),
        ),
        format!(
            "worker_fence/bwrap (the fence's price, median) {:>5} (target: ≤ 0.30)",
            fmt_ratio(w.fence_ratio(false))
        ),
    ];
    if !failed.is_empty() {
        // Attempts the worker reported with a status other than OK (BuildGrid ran the
        // INTERNAL and UNAVAILABLE ones again): not in the own times above.
        // Beside the figures it is about, above the fence's line.
        let at = lines.len() - 1;
        lines.insert(
            at,
            format!(
                "  attempts that failed, not in these times: {} (the JSON's worker_log says why)",
                failed.join(", ")
            ),
        );
    }
    lines
}

fn worker_json(w: &WorkerResults) -> Value {
    let farm: Vec<Value> = w
        .farm
        .iter()
        .map(|r| {
            let mut v = json!({"id": r.id, "fence": r.fence, "input_files": r.input_files,
                "actions_per_s": r.actions_per_s,
                "own_ms_median": r.own_median_us.map(|u| u / 1e3),
                "own_ms_p90": r.own_p90_us.map(|u| u / 1e3),
                "own_excl_server_ms_median": r.own_excl_server_median_us.map(|u| u / 1e3),
                "floor_ms": r.floor_us.map(|u| u / 1e3),
                "cas_probe_ms_median": r.cas_probe_us.map(|u| u / 1e3),
                "skipped": r.skipped});
            if let (Some(o), Some(raw)) = (v.as_object_mut(), r.raw.as_object()) {
                for k in [
                    "wall_s",
                    "actions",
                    "own_us",
                    "phases_ms",
                    "actions_per_worker",
                    "worker_cpu_ms_per_action",
                    "own_excl_server_ms_p90",
                    "server_wait_ms_median",
                    "cas_wait_ms_median",
                    "report_wait_ms_median",
                    "cas_calls_median",
                    "start_ms_median",
                    "handoff_ms_median",
                    "cas_probe_calls",
                    "split_cas",
                    "failed_attempts",
                    "worker_log",
                ] {
                    if let Some(x) = raw.get(k) {
                        o.insert(k.into(), x.clone());
                    }
                }
            }
            v
        })
        .collect();
    let fence: Vec<Value> = w
        .fence
        .iter()
        .map(|r| {
            let price = w.price(r.row).filter(|_| r.row != worker::FenceRow::Plain);
            json!({"id": r.row.id(), "name": r.row.name(), "command": r.row.command(),
                   "min_us": r.dist.map(|d| d.min_us), "median_us": r.dist.map(|d| d.median_us),
                   "p90_us": r.dist.map(|d| d.p90_us), "runs": r.dist.map_or(0, |d| d.runs),
                   "price_min_us": price.map(|p| p.0), "price_median_us": price.map(|p| p.1),
                   "skipped": r.skipped})
        })
        .collect();
    json!({
        "actions": w.actions, "workers": 2, "concurrency": 2,
        "farm": w.farm_info,
        "measures": "actions_per_s: N actions submitted at once (one Execute each, at most 32 \
                     in flight), N / (first Execute -> last result); own: lease received -> \
                     result sent minus the command's run time, as each worker writes it \
                     (--stats-file); own_excl_server: own minus the action's waits on \
                     BuildGrid (the wall time of its CAS/ByteStream calls; result whole -> end \
                     of the UpdateBotSession in flight), per action, median; phases_ms: medians \
                     of the worker's ExecutedActionMetadata stamps; floor: trivial RPCs to the \
                     same BuildGrid from a Python gRPC client (medians, ms), and per row \
                     floor_ms = (median CAS calls + 1 report) × the smallest median; \
                     cas_probe_ms_median: a BatchReadBlobs of one small blob every 20 ms from \
                     another client while the row ran (rows with actions in flight); \
                     split_cas rows: a second farm whose CAS is a BuildGrid process of its own \
                     (worker --remote-cas), split_cas_floor its floor",
        "rows": farm,
        "floor": w.farm_info.get("floor").cloned().unwrap_or(Value::Null),
        "split_cas_floor": w.farm_info.get("split_cas_floor").cloned().unwrap_or(Value::Null),
        "fence": {"unit": "µs", "runs": w.fence_runs, "block": latency::BLOCK,
                  "measures": "/bin/true spawn -> exit (waited for), rows taking turns; price = \
                               the row minus spawnkit_no_fence",
                  "bwrap": w.bwrap_version, "rows": fence},
    })
}
