//! A private server where clone3 is refused (a seccomp filter, as Docker's default profile
//! on some kernels): its spawns take the clone(2) fallback, which learns the child's pid only
//! after the call. `disable_clone3` is process-wide (and inherited by the server's fork):
//! this binary holds a single test function.

mod common;

use std::time::Duration;

use common::probe;
use spawnkit::serve::PrivateServer;
use spawnkit::{Command, ExitStatus, Stdio};

/// Status requests of children that end at once, and plain requests beside them, through a
/// server whose spawns take the clone(2) fallback: each is answered with its own child's
/// end (the reaper cannot tell a child reaped before its spawn knew its pid from one no spawn
/// will register, so it reaps none by P_ALL while such a spawn is under way).
#[test]
fn a_server_on_the_clone2_fallback_answers_every_status_request() {
    spawnkit::disable_clone3();
    let mut server = PrivateServer::start().expect("private server");
    let cmds: Vec<Command> = (0..8)
        .map(|i| {
            let mut c = Command::new(probe());
            c.args(["exit", &i.to_string()]).stdout(Stdio::Null);
            c
        })
        .collect();
    // On a thread, so that an answer never sent fails the test rather than hanging it.
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let client = server.client();
        for round in 0..60 {
            let ids = client.submit_status_many(cmds.iter()).expect("submit");
            let mut got = std::collections::HashMap::new();
            for _ in 0..cmds.len() {
                let (id, st) = client.receive_status().expect("an answer");
                let st = st.unwrap_or_else(|e| panic!("round {round}: {e}"));
                assert!(got.insert(id, st).is_none(), "round {round}: request {id} answered twice");
            }
            for (i, id) in ids.iter().enumerate() {
                assert_eq!(got.get(id), Some(&ExitStatus::Exited(i as i32)), "round {round}");
            }
            let mut child = client.spawn(&cmds[3]).expect("a plain request");
            assert_eq!(child.wait().expect("wait"), ExitStatus::Exited(3), "round {round}");
        }
        let _ = done_tx.send(server);
    });
    let server = done.recv_timeout(Duration::from_secs(120)).expect("every request answered");
    drop(server);
}
