//! A private server where clone3 is refused (a seccomp filter, as Docker's default profile
//! on some kernels): its spawns take the clone(2) fallback, which learns the child's pid only
//! after the call. `disable_clone3` is process-wide (and inherited by the server's fork):
//! this binary holds a single test function.

mod common;

use std::time::Duration;

use spawnkit::serve::PrivateServer;
use spawnkit::ExitStatus;

/// Status requests of children that end at once, and plain requests beside them, through a
/// server whose spawns take the clone(2) fallback: each is answered with its own child's
/// end (the reaper cannot tell a child reaped before its spawn knew its pid from one no spawn
/// will register, so it reaps none by P_ALL while such a spawn is under way).
#[test]
fn a_server_on_the_clone2_fallback_answers_every_status_request() {
    spawnkit::disable_clone3();
    let mut server = PrivateServer::start().expect("private server");
    let cmds = common::exit_codes(8, spawnkit::Strategy::CloneVfork);
    // On a thread, so that an answer never sent fails the test rather than hanging it.
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        common::status_rounds(server.client(), &cmds, 60, |client, round| {
            let mut child = client.spawn(&cmds[3]).expect("a plain request");
            assert_eq!(child.wait().expect("wait"), ExitStatus::Exited(3), "round {round}");
        });
        let _ = done_tx.send(server);
    });
    let server = done.recv_timeout(Duration::from_secs(120)).expect("every request answered");
    drop(server);
}
