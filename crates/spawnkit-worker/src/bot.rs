//! A bot: one session with the server's `Bots` service. It long-polls `UpdateBotSession`
//! for leases while it has room, starts each lease's action on a task of its own, and reports
//! a lease `COMPLETED` (with its status and `ActionResult`) only once the result is whole:
//! every output uploaded. A result that could not be reported stays until it is.
//!
//! The worker runs one bot per `--concurrency` slot, each a session of capacity 1 with a bot
//! id of its own ([`slot_bot_id`]), so that a finished action's report never queues behind
//! another slot's call (calls are serial per session: one session for all slots made each
//! result wait for the call in flight, tens of ms against a loaded BuildGrid). A call that
//! carries no result (a long poll, a keepalive) is dropped when a result is whole, and the
//! result leaves at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bazel_remote_apis::google::rpc::Status;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

use crate::auth::Auth;
use crate::cas::Wait;
use crate::exec::{Executor, Outcome};
use crate::proto::{self, BotSession, BotStatus, BotsClient, Lease, LeaseState};

/// What the bot tells the server about itself.
pub struct BotConfig {
    pub instance: String,
    pub bot_id: String,
    pub capacity: usize,
    pub platform: Vec<(String, String)>,
    /// How long SIGTERM waits for running actions before returning their leases.
    pub drain_timeout: Duration,
}

enum Slot {
    Running { abort: AbortHandle, received: Instant },
    Done { lease: Box<Lease>, received: Instant, run_time: Duration, waits: Waits },
}

/// An action's waits on the servers, for the figures.
#[derive(Clone, Copy)]
struct Waits {
    cas: Wait,
    /// When the action's task began.
    started: Instant,
    /// When the result was whole.
    ready: Instant,
}

impl Waits {
    fn none() -> Waits {
        let now = Instant::now();
        Waits { cas: Wait::default(), started: now, ready: now }
    }
}

/// Figures of one bot's life, for `spawnkit bench worker` and the log line at exit.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Leases reported with an OK status (the command ran and its result is whole; its exit
    /// code may be anything): the ones the figures below are of.
    pub completed: u64,
    /// Leases reported with another status (a CAS that failed, a deadline, a missing input):
    /// attempts, not results. BuildGrid runs the action again where the status says so
    /// (INTERNAL, UNAVAILABLE), and that attempt is counted apart.
    pub failed: u64,
    pub returned: u64,
    pub cancelled: u64,
    pub sessions: u64,
    /// Per completed action: lease received -> result sent, minus the command's run time.
    pub overhead: Vec<Duration>,
    /// Per reported action (the order of `overhead`): the part of it spent waiting on the
    /// servers, `cas_wait + report_wait`.
    pub server_wait: Vec<Duration>,
    /// The wall time of the action's CAS and ByteStream calls, and how many there were.
    pub cas_wait: Vec<Duration>,
    pub cas_calls: Vec<u32>,
    /// Result whole -> the end of the `UpdateBotSession` call that was in flight then (calls
    /// are serial per session: the result waits for it); zero when none was.
    pub report_wait: Vec<Duration>,
    /// Lease received -> the action's task running (the worker's own, not a wait on the
    /// servers: tokio's scheduling and the CPU).
    pub start: Vec<Duration>,
    /// Result whole -> its report sent, minus `report_wait` (the worker's own, likewise).
    pub handoff: Vec<Duration>,
}

/// A result in the request being sent, with its figures.
struct Reported {
    id: String,
    overhead: Duration,
    cas_wait: Wait,
    report_wait: Duration,
    start: Duration,
    handoff: Duration,
}

fn log(msg: impl std::fmt::Display) {
    crate::note(format_args!("{msg}"));
}

pub struct Bot {
    pub client: BotsClient,
    pub auth: Auth,
    pub config: BotConfig,
    pub exec: Arc<Executor>,
}

/// Returned by `shutdown.changed()`: how many termination signals arrived.
pub type Shutdown = watch::Receiver<u32>;

/// The bot id of slot `slot` of the worker whose id is `base`: `BASE/SLOT`. Each slot is a
/// bot of its own to the server (BuildGrid closes a session when another is created with
/// the same bot id, and requeues its leases).
pub fn slot_bot_id(base: &str, slot: usize) -> String {
    format!("{base}/{slot}")
}

impl Stats {
    /// Add another bot's figures to these.
    pub fn merge(&mut self, o: Stats) {
        self.completed += o.completed;
        self.failed += o.failed;
        self.returned += o.returned;
        self.cancelled += o.cancelled;
        self.sessions += o.sessions;
        self.overhead.extend(o.overhead);
        self.server_wait.extend(o.server_wait);
        self.cas_wait.extend(o.cas_wait);
        self.cas_calls.extend(o.cas_calls);
        self.report_wait.extend(o.report_wait);
        self.start.extend(o.start);
        self.handoff.extend(o.handoff);
    }
}

impl Bot {
    fn worker(&self) -> proto::Worker {
        let props = self
            .config
            .platform
            .iter()
            .map(|(k, v)| proto::Property { key: k.clone(), value: v.clone() })
            .collect::<Vec<_>>();
        proto::Worker {
            devices: vec![proto::Device { handle: self.config.bot_id.clone(), properties: props }],
            properties: Vec::new(),
            configs: vec![proto::Property {
                key: "capacity".into(),
                value: self.config.capacity.to_string(),
            }],
        }
    }

    async fn create_session(&mut self) -> Result<BotSession, tonic::Status> {
        let req = proto::CreateBotSessionRequest {
            parent: self.config.instance.clone(),
            bot_session: Some(BotSession {
                bot_id: self.config.bot_id.clone(),
                status: BotStatus::Ok as i32,
                worker: Some(self.worker()),
                ..Default::default()
            }),
        };
        let mut r = self.auth.request(req);
        r.set_timeout(Duration::from_secs(30));
        self.client.create_bot_session(r).await
    }

    /// Run until a termination signal has been handled: running actions finished and reported,
    /// or (after the drain timeout, or a second signal) their leases returned.
    pub async fn run(mut self, mut shutdown: Shutdown) -> Stats {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(String, Outcome)>();
        let mut slots: HashMap<String, Slot> = HashMap::new();
        let mut session: Option<BotSession> = None;
        let mut stats = Stats::default();
        let mut terminating: Option<Instant> = None;
        let mut backoff = Duration::from_millis(200);
        let capacity = self.config.capacity;
        // When the last Bots call ended (or was dropped): a result whole before then waited
        // for it.
        let mut last_call_end = Instant::now();

        loop {
            while let Ok((id, out)) = done_rx.try_recv() {
                complete(&mut slots, id, out);
            }
            let signals = *shutdown.borrow();
            if signals > 0 && terminating.is_none() {
                log("terminating: no new leases; finishing the running ones");
                terminating = Some(Instant::now());
            }
            if let Some(t) = terminating {
                let expired = t.elapsed() >= self.config.drain_timeout || signals > 1;
                if expired {
                    return_leases(&mut slots, "the worker was stopped before the action finished");
                }
                let has_done = slots.values().any(|s| matches!(s, Slot::Done { .. }));
                if slots.is_empty() || (session.is_none() && !has_done && expired) {
                    if let (Some(s), true) = (&session, slots.is_empty()) {
                        self.farewell(s).await;
                    }
                    break;
                }
            }

            let Some(current) = session.clone() else {
                match self.create_session().await {
                    Ok(mut s) => {
                        log(format_args!("bot session {} (bot id {})", s.name, s.bot_id));
                        stats.sessions += 1;
                        backoff = Duration::from_millis(200);
                        let leases = std::mem::take(&mut s.leases);
                        session = Some(s);
                        self.take_leases(leases, &mut slots, &done_tx, terminating.is_some());
                    }
                    Err(e) => {
                        log(format_args!("CreateBotSession: {}: {}", e.code(), e.message()));
                        wait_or_signal(backoff, &mut shutdown).await;
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                    }
                }
                continue;
            };

            let running = slots.values().filter(|s| matches!(s, Slot::Running { .. })).count();
            let has_done = slots.values().any(|s| matches!(s, Slot::Done { .. }));
            let long_poll = !has_done && running < capacity && terminating.is_none();
            if !has_done && !long_poll {
                // At capacity (or draining) with nothing to report: wait for a result, a
                // signal, the end of the drain, or the time of a keepalive.
                let mut wake = Duration::from_secs(5);
                if let Some(t) = terminating {
                    wake = wake.min(
                        t.checked_add(self.config.drain_timeout)
                            .map_or(wake, |end| end.saturating_duration_since(Instant::now())),
                    );
                }
                tokio::select! {
                    d = done_rx.recv() => {
                        if let Some((id, out)) = d { complete(&mut slots, id, out); }
                        continue;
                    }
                    _ = shutdown.changed() => continue,
                    _ = tokio::time::sleep(wake) => {
                        if terminating.is_some() { continue; }
                    }
                }
            }

            // The request: every lease we hold, running ones ACTIVE, finished ones COMPLETED.
            let mut leases = Vec::new();
            let mut reported = Vec::new();
            let sent_at = Instant::now();
            for (id, slot) in &slots {
                match slot {
                    Slot::Running { .. } => leases.push(Lease {
                        id: id.clone(),
                        state: LeaseState::Active as i32,
                        ..Default::default()
                    }),
                    Slot::Done { lease, received, run_time, waits } => {
                        leases.push((**lease).clone());
                        let total = sent_at.duration_since(*received);
                        let report_wait = last_call_end.saturating_duration_since(waits.ready);
                        reported.push(Reported {
                            id: id.clone(),
                            overhead: total.saturating_sub(*run_time),
                            cas_wait: waits.cas,
                            report_wait,
                            start: waits.started.saturating_duration_since(*received),
                            handoff: sent_at
                                .saturating_duration_since(waits.ready)
                                .saturating_sub(report_wait),
                        });
                    }
                }
            }
            let mut bs = current.clone();
            bs.leases = leases;
            bs.status = if terminating.is_some() {
                BotStatus::BotTerminating as i32
            } else {
                BotStatus::Ok as i32
            };
            let req = proto::UpdateBotSessionRequest {
                name: bs.name.clone(),
                bot_session: Some(bs),
                update_mask: None,
            };
            let mut r = self.auth.request(req);
            r.set_timeout(if long_poll {
                Duration::from_secs(20)
            } else {
                Duration::from_secs(30)
            });
            let mut client = self.client.clone();
            let call = client.update_bot_session(r);
            tokio::pin!(call);
            let resp = tokio::select! {
                resp = &mut call => resp,
                d = done_rx.recv(), if reported.is_empty() => {
                    // Drop the call (a long poll or a keepalive: it carries no result) to
                    // report at once. A lease the server assigned in the cancelled call is
                    // sent again by the next one (it is ours in its database), so nothing
                    // is lost.
                    last_call_end = Instant::now();
                    if let Some((id, out)) = d { complete(&mut slots, id, out); }
                    continue;
                }
                _ = shutdown.changed(), if long_poll => {
                    last_call_end = Instant::now();
                    continue;
                }
            };
            last_call_end = Instant::now();
            match resp {
                Ok(mut s) => {
                    backoff = Duration::from_millis(200);
                    for r in reported {
                        if let Some(Slot::Done { lease, .. }) = slots.remove(&r.id) {
                            let code = lease.status.as_ref().map_or(0, |s| s.code);
                            if code == tonic::Code::Unavailable as i32 && terminating.is_some() {
                                stats.returned += 1;
                            } else if code != tonic::Code::Ok as i32 {
                                stats.failed += 1;
                            } else {
                                stats.completed += 1;
                                stats.overhead.push(r.overhead);
                                stats.server_wait.push(r.cas_wait.time + r.report_wait);
                                stats.cas_wait.push(r.cas_wait.time);
                                stats.cas_calls.push(r.cas_wait.calls);
                                stats.report_wait.push(r.report_wait);
                                stats.start.push(r.start);
                                stats.handoff.push(r.handoff);
                            }
                        }
                    }
                    let leases = std::mem::take(&mut s.leases);
                    // A running lease the server no longer lists was cancelled (or given to
                    // another bot): stop it.
                    let listed: std::collections::HashSet<&str> =
                        leases.iter().map(|l| l.id.as_str()).collect();
                    let gone: Vec<String> = slots
                        .iter()
                        .filter(|(id, s)| {
                            matches!(s, Slot::Running { .. }) && !listed.contains(id.as_str())
                        })
                        .map(|(id, _)| id.clone())
                        .collect();
                    for id in gone {
                        if let Some(Slot::Running { abort, .. }) = slots.remove(&id) {
                            abort.abort();
                            stats.cancelled += 1;
                            log(format_args!("lease {id} cancelled by the server"));
                        }
                    }
                    session = Some(s);
                    self.take_leases(leases, &mut slots, &done_tx, terminating.is_some());
                }
                Err(e) => match e.code() {
                    tonic::Code::DeadlineExceeded if long_poll => {}
                    tonic::Code::NotFound
                    | tonic::Code::InvalidArgument
                    | tonic::Code::FailedPrecondition
                    | tonic::Code::PermissionDenied => {
                        log(format_args!(
                            "UpdateBotSession: {}: {}; starting a new session",
                            e.code(),
                            e.message()
                        ));
                        session = None;
                        wait_or_signal(backoff, &mut shutdown).await;
                    }
                    _ => {
                        log(format_args!("UpdateBotSession: {}: {}", e.code(), e.message()));
                        wait_or_signal(backoff, &mut shutdown).await;
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                    }
                },
            }
        }
        stats
    }

    /// Tell the server this bot is going (BOT_TERMINATING), so that it assigns it nothing
    /// more; best effort.
    async fn farewell(&mut self, current: &BotSession) {
        let mut bs = current.clone();
        bs.leases.clear();
        bs.status = BotStatus::BotTerminating as i32;
        let req = proto::UpdateBotSessionRequest {
            name: bs.name.clone(),
            bot_session: Some(bs),
            update_mask: None,
        };
        let mut r = self.auth.request(req);
        r.set_timeout(Duration::from_secs(5));
        if let Err(e) = self.client.update_bot_session(r).await {
            log(format_args!("UpdateBotSession (terminating): {}: {}", e.code(), e.message()));
        }
    }

    /// Start the new leases of a response (ACTIVE ones we do not hold yet). While draining,
    /// a new lease is handed straight back (UNAVAILABLE: the scheduler gives it to another
    /// worker).
    fn take_leases(
        &self,
        leases: Vec<Lease>,
        slots: &mut HashMap<String, Slot>,
        done_tx: &mpsc::UnboundedSender<(String, Outcome)>,
        terminating: bool,
    ) {
        for lease in leases {
            if slots.contains_key(&lease.id) {
                continue;
            }
            if lease.state != LeaseState::Active as i32 && lease.state != LeaseState::Pending as i32
            {
                continue;
            }
            let received = Instant::now();
            if terminating {
                let lease = returned_lease(&lease.id, "the worker is shutting down");
                slots.insert(
                    lease.id.clone(),
                    Slot::Done {
                        lease: Box::new(lease),
                        received,
                        run_time: Duration::ZERO,
                        waits: Waits::none(),
                    },
                );
                continue;
            }
            let exec = self.exec.clone();
            let tx = done_tx.clone();
            let id = lease.id.clone();
            let payload = lease.payload;
            let handle = tokio::spawn(async move {
                let (out, workspace) = exec.run(payload).await;
                let _ = tx.send((id, out));
                // Cleaned after the result has left for the bot, not before: yield first, so
                // that the bot's task (woken onto this thread) sends the report meanwhile.
                tokio::task::yield_now().await;
                workspace.release();
            });
            slots.insert(lease.id, Slot::Running { abort: handle.abort_handle(), received });
        }
    }
}

fn complete(slots: &mut HashMap<String, Slot>, id: String, out: Outcome) {
    let Some(Slot::Running { received, .. }) = slots.get(&id) else { return };
    let received = *received;
    if out.status.code != 0 {
        log(format_args!(
            "lease {id}: {}: {}",
            tonic::Code::from(out.status.code),
            out.status.message
        ));
    }
    let lease = Lease {
        id: id.clone(),
        state: LeaseState::Completed as i32,
        status: Some(out.status),
        result: out.result.map(|r| proto::pack("build.bazel.remote.execution.v2.ActionResult", &r)),
        ..Default::default()
    };
    let waits = Waits { cas: out.cas_wait, started: out.started, ready: out.ready };
    slots
        .insert(id, Slot::Done { lease: Box::new(lease), received, run_time: out.run_time, waits });
}

fn returned_lease(id: &str, why: &str) -> Lease {
    Lease {
        id: id.to_owned(),
        state: LeaseState::Completed as i32,
        status: Some(Status {
            code: tonic::Code::Unavailable as i32,
            message: why.to_owned(),
            details: Vec::new(),
        }),
        ..Default::default()
    }
}

/// Stop every running action (its process tree dies with it) and mark its lease to be
/// handed back as UNAVAILABLE, which BuildGrid retries on another worker.
fn return_leases(slots: &mut HashMap<String, Slot>, why: &str) {
    let running: Vec<String> = slots
        .iter()
        .filter(|(_, s)| matches!(s, Slot::Running { .. }))
        .map(|(id, _)| id.clone())
        .collect();
    for id in running {
        if let Some(Slot::Running { abort, received }) = slots.remove(&id) {
            abort.abort();
            log(format_args!("returning lease {id}"));
            let lease = returned_lease(&id, why);
            slots.insert(
                id,
                Slot::Done {
                    lease: Box::new(lease),
                    received,
                    run_time: Duration::ZERO,
                    waits: Waits::none(),
                },
            );
        }
    }
}

async fn wait_or_signal(d: Duration, shutdown: &mut Shutdown) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = shutdown.changed() => {}
    }
}
