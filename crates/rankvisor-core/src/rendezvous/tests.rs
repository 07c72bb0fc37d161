//! Loopback tests: a real master and real workers on 127.0.0.1, with hang guards and handshakes
//! (events, observers) instead of sleeps.

use std::future::Future;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::frame::{encode, Frame, Hello, DEFAULT_MAX_FRAME};
use super::io::FrameReader;
use super::worker::join_observed;
use super::*;
use crate::exit::ExitHow;
use crate::policy::RestartScope;
use crate::status::{Identity, LocalStatus, ReplicaState, Report, Timeline};

const GUARD: Duration = Duration::from_secs(10);

async fn guard<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(GUARD, f).await {
        Ok(out) => out,
        Err(_) => panic!("hang guard: {what} took over {GUARD:?}"),
    }
}

fn identity(index: u32, count: u32) -> Member {
    Member { job: "pytest".into(), replica_index: index, replica_count: count, node: format!("node-{index}") }
}

fn healthy() -> Health {
    Health::from(NodeHealth::labelled("Schedulable"))
}

fn unhealthy() -> Health {
    Health::from(NodeHealth::labelled("UnschedulablePendingReboot"))
}

fn cfg() -> RendezvousConfig {
    RendezvousConfig {
        hello_timeout: Duration::from_secs(5),
        barrier_timeout: Duration::from_secs(8),
        heartbeat: Duration::from_millis(300),
        token: None,
        max_frame: DEFAULT_MAX_FRAME,
    }
}

/// A started master and its events.
struct TestMaster {
    handle: MasterHandle,
    events: mpsc::Receiver<ControlEvent>,
}

impl std::ops::Deref for TestMaster {
    type Target = MasterHandle;
    fn deref(&self) -> &MasterHandle {
        &self.handle
    }
}

async fn master_with(count: u32, health: watch::Receiver<Health>, cfg: RendezvousConfig) -> TestMaster {
    // These tests drive job-scope restarts (workers asking for a new generation).
    master_scoped(count, health, cfg, RestartScope::Job).await
}

async fn master_scoped(
    count: u32,
    health: watch::Receiver<Health>,
    cfg: RendezvousConfig,
    scope: RestartScope,
) -> TestMaster {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (handle, events) = start_master(listener, identity(0, count), health, cfg, scope).unwrap();
    TestMaster { handle, events }
}

async fn master(count: u32, cfg: RendezvousConfig) -> TestMaster {
    master_with(count, healthy().fixed(), cfg).await
}

fn at(m: &MasterHandle) -> (String, u16) {
    ("127.0.0.1".to_string(), m.local_addr().port())
}

type Joining = JoinHandle<Result<WorkerSession, RendezvousError>>;

fn spawn_join(to: (String, u16), me: Member, cfg: RendezvousConfig) -> Joining {
    tokio::spawn(join(to, me, healthy().fixed(), cfg))
}

async fn joined(w: Joining) -> Result<WorkerSession, RendezvousError> {
    guard("a worker's join", w).await.unwrap()
}

/// Wait for the first event matching `want`, skipping the others.
async fn event(m: &mut TestMaster, what: &str, want: impl Fn(&ControlEvent) -> bool) -> ControlEvent {
    guard(what, async {
        loop {
            let e = m.events.recv().await.expect("events end only with the master");
            if want(&e) {
                return e;
            }
        }
    })
    .await
}

async fn joined_event(m: &mut TestMaster, index: u32) -> ControlEvent {
    event(m, "a join event", |e| matches!(e, ControlEvent::Joined { index: i, .. } if *i == index)).await
}

/// A hand-driven peer speaking raw frames.
struct Raw {
    reader: FrameReader<OwnedReadHalf>,
    write: OwnedWriteHalf,
}

impl Raw {
    async fn connect(to: &(String, u16)) -> Raw {
        let stream = TcpStream::connect((to.0.as_str(), to.1)).await.unwrap();
        let (read, write) = stream.into_split();
        Raw { reader: FrameReader::new(read, DEFAULT_MAX_FRAME), write }
    }

    async fn send(&mut self, frame: &Frame) {
        let line = encode(frame, DEFAULT_MAX_FRAME).unwrap();
        self.write.write_all(&line).await.unwrap();
    }

    async fn recv(&mut self) -> Option<Frame> {
        recv(&mut self.reader).await
    }

    async fn error(&mut self) -> String {
        read_error(&mut self.reader).await
    }
}

/// The next frame other than a heartbeat; None at EOF or on a broken connection.
async fn recv(reader: &mut FrameReader<OwnedReadHalf>) -> Option<Frame> {
    guard("a raw read", async {
        loop {
            match reader.next().await {
                Ok(Some(Frame::Heartbeat)) => continue,
                Ok(frame) => return frame,
                Err(_) => return None,
            }
        }
    })
    .await
}

async fn read_error(reader: &mut FrameReader<OwnedReadHalf>) -> String {
    match recv(reader).await {
        Some(Frame::Error { message }) => message,
        other => panic!("expected an error frame, got {other:?}"),
    }
}

fn raw_hello(index: u32, count: u32) -> Frame {
    Frame::Hello(Hello {
        job: "pytest".into(),
        replica_index: index,
        replica_count: count,
        node: format!("raw-{index}"),
        healthy: true,
        health: NodeHealth::Off,
        nonce: "00".repeat(32),
    })
}

fn report(status: &LocalStatus) -> Report {
    Timeline::new(std::time::UNIX_EPOCH).report(&Identity::default(), status, std::time::UNIX_EPOCH)
}

fn state(state: ReplicaState) -> Report {
    report(&LocalStatus {
        state,
        restart_count: 1,
        last_exit: Some(ExitHow::Exited(137)),
        progress: crate::heartbeat::parse_progress(r#"{"step": 42}"#),
        ..LocalStatus::default()
    })
}

// 1. Four replicas; the workers dial before the master listens and retry until it does.
#[tokio::test]
async fn four_replicas_meet_even_when_workers_dial_first() {
    // The port is held by a socket bound but not listening: a dial is refused, and no other
    // process can take the port before the master listens on it (a port dropped and bound again
    // later could be).
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    let to = ("127.0.0.1".to_string(), port);
    let mut workers = Vec::new();
    let mut observers = Vec::new();
    for i in 1..4 {
        let (tx, rx) = mpsc::unbounded_channel();
        workers.push(tokio::spawn(join_observed(to.clone(), identity(i, 4), healthy().fixed(), cfg(), Some(tx))));
        observers.push(rx);
    }
    for rx in &mut observers {
        let failure = guard("a refused dial", rx.recv()).await.unwrap();
        assert!(failure.contains("cannot connect"), "{failure}");
    }
    let listener = socket.listen(1024).unwrap();
    let (m, _events) = start_master(listener, identity(0, 4), healthy().fixed(), cfg(), RestartScope::Job).unwrap();
    let released = guard("the barrier", m.barrier(0)).await.unwrap();
    assert_eq!(released.generation, 0);
    for w in workers {
        let session = joined(w).await.unwrap();
        assert_eq!(session.generation(), 0);
    }
    let view = m.job_view();
    assert_eq!(view.replicas().len(), 4);
    assert!(view.replicas().values().all(|r| r.connected && r.state() != ReplicaState::Failed));
    assert_eq!(view.replicas()[&2].node, "node-2");
}

#[tokio::test]
async fn a_single_replica_job_releases_at_once() {
    let m = master(1, cfg()).await;
    assert_eq!(guard("the barrier", m.barrier(0)).await.unwrap().generation, 0);
}

// 2. A missing replica: the master's timeout names it, and the waiting worker hears it too.
#[tokio::test]
async fn a_missing_replica_times_out_and_is_named() {
    let short = RendezvousConfig { barrier_timeout: Duration::from_millis(300), ..cfg() };
    let mut m = master(3, short).await;
    let w1 = spawn_join(at(&m), identity(1, 3), cfg());
    joined_event(&mut m, 1).await;
    let e = guard("the barrier", m.barrier(0)).await.unwrap_err();
    match &e {
        RendezvousError::BarrierTimeout { missing, unhealthy, .. } => {
            assert_eq!((missing.as_slice(), unhealthy.as_slice()), (&[2][..], &[][..]));
        }
        other => panic!("expected a barrier timeout, got {other}"),
    }
    assert!(e.to_string().contains("replica indexes [2] missing"), "{e}");
    let worker = joined(w1).await.err().expect("the worker fails too").to_string();
    assert!(
        worker.contains(
            "answered: rendezvous barrier for generation 0 timed out after 300ms: replica indexes [2] missing"
        ),
        "{worker}"
    );
}

// The worker's own timeout runs out first (it started earlier); admitted, it waits for the
// master's verdict instead of leaving, so it names the missing replica too.
#[tokio::test]
async fn an_admitted_worker_waits_for_the_masters_verdict() {
    let same = RendezvousConfig { barrier_timeout: Duration::from_millis(400), ..cfg() };
    let mut m = master(3, same.clone()).await;
    let w1 = spawn_join(at(&m), identity(1, 3), same);
    joined_event(&mut m, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e = guard("the barrier", m.barrier(0)).await.unwrap_err();
    assert!(e.to_string().contains("replica indexes [2] missing"), "{e}");
    let worker = joined(w1).await.err().expect("the worker fails too").to_string();
    assert!(worker.contains("answered: rendezvous barrier for generation 0 timed out"), "{worker}");
}

#[tokio::test]
async fn a_worker_without_a_master_times_out_naming_the_last_error() {
    let reserved = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = reserved.local_addr().unwrap().port();
    drop(reserved);
    let short = RendezvousConfig { barrier_timeout: Duration::from_millis(400), ..cfg() };
    let e = guard("a join", join(("127.0.0.1".into(), port), identity(1, 2), healthy().fixed(), short))
        .await
        .err()
        .expect("no master")
        .to_string();
    assert!(
        e.starts_with(&format!(
            "rendezvous with master 127.0.0.1:{port} did not complete within 400ms (cannot connect"
        )),
        "{e}"
    );
}

#[tokio::test]
async fn an_unresolvable_master_name_is_retried_until_the_timeout() {
    let short = RendezvousConfig { barrier_timeout: Duration::from_millis(500), ..cfg() };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let w = tokio::spawn(join_observed(
        ("no-such-host.invalid".into(), 1),
        identity(1, 2),
        healthy().fixed(),
        short,
        Some(tx),
    ));
    let first = guard("a failed resolve", rx.recv()).await.unwrap();
    assert!(first.contains("cannot connect"), "{first}");
    let e = joined(w).await.err().expect("no master").to_string();
    assert!(e.contains("no-such-host.invalid:1 did not complete within 500ms"), "{e}");
}

#[tokio::test]
async fn an_unhealthy_replica_holds_the_barrier_and_is_reported() {
    let short = RendezvousConfig { barrier_timeout: Duration::from_millis(300), ..cfg() };
    let mut m = master(3, short).await;
    let w1 = tokio::spawn(join(at(&m), identity(1, 3), unhealthy().fixed(), cfg()));
    let w2 = spawn_join(at(&m), identity(2, 3), cfg());
    let e = joined_event(&mut m, 1).await;
    assert!(matches!(e, ControlEvent::Joined { healthy: false, .. }), "{e:?}");
    joined_event(&mut m, 2).await;
    let e = guard("the barrier", m.barrier(0)).await.unwrap_err().to_string();
    assert!(e.contains("replica indexes [1] on unhealthy nodes"), "{e}");
    assert!(!e.contains("missing"), "{e}");
    for w in [w1, w2] {
        let worker = joined(w).await.err().expect("waiting workers fail too").to_string();
        assert!(worker.contains("[1] on unhealthy nodes"), "{worker}");
    }
}

#[tokio::test]
async fn the_barrier_releases_once_every_node_is_healthy_again() {
    let (master_health, master_rx) = watch::channel(unhealthy());
    let mut m = master_with(2, master_rx, cfg()).await;
    let (worker_health, worker_rx) = watch::channel(unhealthy());
    let w1 = tokio::spawn(join(at(&m), identity(1, 2), worker_rx, cfg()));
    joined_event(&mut m, 1).await;
    assert!(tokio::time::timeout(Duration::from_millis(100), m.barrier(0)).await.is_err(), "held while unhealthy");
    worker_health.send(healthy()).unwrap();
    let e = event(&mut m, "a health event", |e| matches!(e, ControlEvent::Health { .. })).await;
    assert_eq!(e, ControlEvent::Health { index: 1, health: healthy() });
    assert!(tokio::time::timeout(Duration::from_millis(100), m.barrier(0)).await.is_err(), "held by the master's node");
    master_health.send(healthy()).unwrap();
    assert_eq!(guard("the barrier", m.barrier(0)).await.unwrap().generation, 0);
    assert_eq!(joined(w1).await.unwrap().generation(), 0);
    assert!(m.job_view().replicas()[&1].health.healthy);
}

// 3. Refusals name their cause, and the legitimate job still completes.
#[tokio::test]
async fn bad_peers_are_refused_by_name_and_the_job_completes() {
    let token = RendezvousConfig { token: Some(b"s3cret".to_vec()), ..cfg() };
    let mut m = master(4, token.clone()).await;
    let to = at(&m);
    let w1 = spawn_join(to.clone(), identity(1, 4), token.clone());
    joined_event(&mut m, 1).await;

    let refused = |e: Result<WorkerSession, RendezvousError>| e.err().expect("refused").to_string();
    // Index 1 from another node: a duplicate (the same node would be replica 1 reconnecting).
    let elsewhere = Member { node: "node-x".into(), ..identity(1, 4) };
    let dup = refused(guard("dup", join(to.clone(), elsewhere, healthy().fixed(), token.clone())).await);
    assert!(dup.ends_with("answered: replica_index 1 is already held by a connected peer on node \"node-1\""), "{dup}");

    let count = refused(guard("count", join(to.clone(), identity(2, 5), healthy().fixed(), token.clone())).await);
    assert!(count.ends_with("answered: replica_count 5 does not match the master's replica count 4"), "{count}");

    let other_job = Member { job: "other".into(), ..identity(2, 4) };
    let job = refused(guard("job", join(to.clone(), other_job, healthy().fixed(), token.clone())).await);
    assert!(job.ends_with("answered: job \"other\" does not match the master's job \"pytest\""), "{job}");

    let wrong = RendezvousConfig { token: Some(b"guess".to_vec()), ..cfg() };
    let bad_token = refused(guard("token", join(to.clone(), identity(2, 4), healthy().fixed(), wrong)).await);
    assert!(
        bad_token.contains("answered: job token check failed: the worker's proof of the job token does not match"),
        "{bad_token}"
    );
    assert!(!bad_token.contains("s3cret") && !bad_token.contains("guess"), "{bad_token}");

    let none = refused(guard("no token", join(to.clone(), identity(2, 4), healthy().fixed(), cfg())).await);
    assert!(none.contains("the master requires a job token, but RANKVISOR_JOB_TOKEN is not set"), "{none}");

    // A rankvisor of protocol version 1 (state frames without the typed report) is refused by name.
    let mut v1 = Raw::connect(&to).await;
    v1.write.write_all(b"{\"v\":1,\"type\":\"hello\",\"job\":\"pytest\",\"replica_index\":2}\n").await.unwrap();
    let version = v1.error().await;
    assert_eq!(version, "unsupported protocol version 1: this rankvisor speaks version 2");
    assert_eq!(v1.recv().await, None, "closed after the refusal");

    let mut out_of_turn = Raw::connect(&to).await;
    out_of_turn.send(&Frame::State(Box::new(state(ReplicaState::Running)))).await;
    assert_eq!(out_of_turn.error().await, "expected a frame of type hello, got state");

    let w2 = spawn_join(to.clone(), identity(2, 4), token.clone());
    let w3 = spawn_join(to.clone(), identity(3, 4), token.clone());
    assert_eq!(guard("the barrier", m.barrier(0)).await.unwrap().generation, 0);
    for w in [w1, w2, w3] {
        assert_eq!(joined(w).await.unwrap().generation(), 0);
    }
}

#[tokio::test]
async fn a_raw_peer_with_a_forged_proof_is_refused() {
    let token = RendezvousConfig { token: Some(b"s3cret".to_vec()), ..cfg() };
    let m = master(2, token).await;
    let mut raw = Raw::connect(&at(&m)).await;
    raw.send(&raw_hello(1, 2)).await;
    assert!(matches!(raw.recv().await, Some(Frame::Challenge { .. })));
    raw.send(&Frame::Auth { proof: "ab".repeat(32) }).await;
    let e = raw.error().await;
    assert!(e.starts_with("job token check failed: the worker's proof of the job token does not match"), "{e}");
    let mut raw = Raw::connect(&at(&m)).await;
    raw.send(&raw_hello(1, 2)).await;
    assert!(matches!(raw.recv().await, Some(Frame::Challenge { .. })));
    raw.send(&Frame::Heartbeat).await;
    raw.send(&Frame::Release { generation: 0 }).await;
    assert_eq!(raw.error().await, "expected a frame of type auth, got release");
}

#[tokio::test]
async fn a_worker_with_a_token_does_not_trust_a_master_without_one() {
    let mut m = master(2, cfg()).await;
    let token = RendezvousConfig { token: Some(b"s3cret".to_vec()), ..cfg() };
    let e =
        guard("join", join(at(&m), identity(1, 2), healthy().fixed(), token)).await.err().expect("refused").to_string();
    assert!(e.contains("admitted this replica without checking the job token"), "{e}");
    event(&mut m, "the loss of the distrustful worker", |e| matches!(e, ControlEvent::Lost { index: 1, .. })).await;
}

// 4. Garbage, an endless line and a silent peer never hold up the legitimate replicas.
#[tokio::test]
async fn garbage_and_silence_do_not_slow_the_barrier() {
    let patient = RendezvousConfig { hello_timeout: Duration::from_secs(30), ..cfg() };
    let m = master(4, patient).await;
    let to = at(&m);
    let _silent = TcpStream::connect((to.0.as_str(), to.1)).await.unwrap();

    let mut garbage = Raw::connect(&to).await;
    let mut noise = vec![0u8; 4096];
    getrandom::fill(&mut noise).unwrap();
    noise.push(b'\n');
    garbage.write.write_all(&noise).await.unwrap();

    let Raw { reader: mut endless, write: mut endless_write } = Raw::connect(&to).await;
    let flood = tokio::spawn(async move {
        let chunk = vec![b'x'; 1024 * 1024];
        for _ in 0..10 {
            if endless_write.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });

    let workers: Vec<Joining> = (1..4).map(|i| spawn_join(to.clone(), identity(i, 4), cfg())).collect();
    let released = guard("the barrier", m.barrier(0)).await.unwrap();
    assert!(released.waited < Duration::from_secs(2), "took {:?}", released.waited);
    for w in workers {
        joined(w).await.unwrap();
    }

    let refused = garbage.error().await;
    assert!(refused.starts_with("frame is"), "{refused}");
    assert_eq!(garbage.recv().await, None);
    let refused = read_error(&mut endless).await;
    assert_eq!(refused, "frame exceeds the limit of 65536 bytes (no newline within it)");
    guard("the flood ends", flood).await.unwrap();
}

#[tokio::test]
async fn a_silent_peer_is_refused_after_the_hello_time_limit() {
    let quick = RendezvousConfig { hello_timeout: Duration::from_millis(200), ..cfg() };
    let m = master(2, quick).await;
    let mut silent = Raw::connect(&at(&m)).await;
    assert_eq!(silent.error().await, "no hello within 200ms: a peer must introduce itself first");
    assert_eq!(silent.recv().await, None);
}

// 5. States reach the master; a dead worker and a silent worker are lost; a lost master ends
//    the worker's orders.
#[tokio::test]
async fn states_stream_to_the_master_and_losses_are_detected() {
    let mut m = master(3, cfg()).await;
    let to = at(&m);
    let w1 = spawn_join(to.clone(), identity(1, 3), cfg());
    let w2 = spawn_join(to.clone(), identity(2, 3), cfg());
    guard("the barrier", m.barrier(0)).await.unwrap();
    let mut w1 = joined(w1).await.unwrap();
    let w2 = joined(w2).await.unwrap();

    w1.send_state(state(ReplicaState::Restarting)).unwrap();
    let e = event(&mut m, "a state event", |e| matches!(e, ControlEvent::State { .. })).await;
    assert_eq!(e, ControlEvent::State { index: 1, report: Box::new(state(ReplicaState::Restarting)) });
    m.publish_own_state(report(&LocalStatus { state: ReplicaState::Running, ..LocalStatus::default() }));
    let view = m.job_view();
    assert_eq!(view.phase(), JobPhase::Running);
    let r1 = &view.replicas()[&1];
    assert_eq!((r1.state(), r1.restart_count()), (ReplicaState::Restarting, 1));
    assert_eq!(r1.last_exit().map(|e| e.status), Some(137));
    assert_eq!(r1.report().and_then(Report::training_step), Some(42));
    assert!(r1.last_seen_unix_ms > 0);

    drop(w2);
    let e = event(&mut m, "the loss of worker 2", |e| matches!(e, ControlEvent::Lost { .. })).await;
    assert_eq!(e, ControlEvent::Lost { index: 2, reason: "connection closed".into() });
    assert!(!m.job_view().replicas()[&2].connected);

    // A replacement for replica 2 joins the running job at once, then falls silent.
    let mut silent = Raw::connect(&to).await;
    silent.send(&raw_hello(2, 3)).await;
    assert_eq!(silent.recv().await, Some(Frame::Admitted { generation: 0, proof: None }));
    assert_eq!(silent.recv().await, Some(Frame::Release { generation: 0 }));
    let e = event(&mut m, "the loss of the silent worker", |e| matches!(e, ControlEvent::Lost { .. })).await;
    assert_eq!(e, ControlEvent::Lost { index: 2, reason: "silent for 900ms".into() });

    let too_big = Report {
        progress: crate::heartbeat::parse_progress(&format!(r#"{{"note": "{}"}}"#, "x".repeat(DEFAULT_MAX_FRAME))),
        ..state(ReplicaState::Running)
    };
    assert!(too_big.progress.is_some());
    assert!(matches!(w1.send_state(too_big), Err(RendezvousError::TooLarge { .. })));

    drop(m);
    assert_eq!(guard("the lost master", w1.next_order()).await, None);
    // A master that closes with frames unread by it resets the connection: either way it is gone.
    let reason = w1.lost_reason().unwrap_or_default().to_string();
    assert!(reason == "master closed the connection" || reason.contains("reset by peer"), "{reason}");
    assert!(w1.send_state(state(ReplicaState::Running)).is_err());
}

// The master's connection task keeps one timer for both limits: a peer that keeps talking gets
// the master's heartbeats and outlives the silence limit many times over; once it falls silent
// it is lost for its silence, not for anything else.
#[tokio::test]
async fn one_timer_keeps_the_heartbeat_and_the_silence_limit() {
    let mut m = master(2, cfg()).await;
    let mut peer = Raw::connect(&at(&m)).await;
    peer.send(&raw_hello(1, 2)).await;
    assert_eq!(peer.recv().await, Some(Frame::Admitted { generation: 0, proof: None }));
    guard("the barrier", m.barrier(0)).await.unwrap();
    assert_eq!(peer.recv().await, Some(Frame::Release { generation: 0 }));
    // 3 s of talking (more than 3 silence limits of 900 ms): the master's heartbeats (every
    // 300 ms while it has nothing else to say) keep coming, and it never drops the peer.
    let (mut heard, talking) = (0, tokio::time::Instant::now());
    while talking.elapsed() < Duration::from_secs(3) {
        peer.send(&Frame::Heartbeat).await;
        let next = tokio::time::timeout(Duration::from_millis(200), peer.reader.next()).await;
        match next {
            Ok(Ok(Some(Frame::Heartbeat))) => heard += 1,
            Err(_) => {}
            other => panic!("a talking peer got {other:?}"),
        }
    }
    assert!(heard >= 3, "only {heard} heartbeats from the master in 3 s at a 300 ms interval");
    assert!(m.job_view().replicas()[&1].connected, "a talking peer is never lost");
    // Now silent: lost for it, while the master's heartbeats still reach it until then.
    let e = event(&mut m, "the loss of the silent peer", |e| matches!(e, ControlEvent::Lost { .. })).await;
    assert_eq!(e, ControlEvent::Lost { index: 1, reason: "silent for 900ms".into() });
}

#[tokio::test]
async fn a_silent_master_is_lost() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (read, mut write) = stream.into_split();
        let mut reader = FrameReader::new(read, DEFAULT_MAX_FRAME);
        assert!(matches!(reader.next().await, Ok(Some(Frame::Hello(_)))));
        for frame in [Frame::Admitted { generation: 0, proof: None }, Frame::Release { generation: 0 }] {
            write.write_all(&encode(&frame, DEFAULT_MAX_FRAME).unwrap()).await.unwrap();
        }
        // Keep reading the worker's heartbeats, and say nothing more.
        while let Ok(Some(_)) = reader.next().await {}
        drop(write);
    });
    let mut w =
        guard("join", join(("127.0.0.1".into(), port), identity(1, 2), healthy().fixed(), cfg())).await.unwrap();
    assert_eq!(guard("the silent master", w.next_order()).await, None);
    assert_eq!(w.lost_reason(), Some("master silent for 900ms"));
    fake.abort();
}

// 6. A second generation: Restart, every worker re-acknowledges, Release.
#[tokio::test]
async fn a_new_generation_restarts_every_worker_together() {
    let mut m = master(3, cfg()).await;
    let to = at(&m);
    let w1 = spawn_join(to.clone(), identity(1, 3), cfg());
    let w2 = spawn_join(to.clone(), identity(2, 3), cfg());
    guard("the barrier", m.barrier(0)).await.unwrap();
    let mut w1 = joined(w1).await.unwrap();
    let mut w2 = joined(w2).await.unwrap();

    let follow = |mut w: WorkerSession, g: u64| async move {
        let order = w.next_order().await;
        assert_eq!(order, Some(Order::Restart { generation: g }));
        let released = w.rejoin(g).await.unwrap();
        (w, released)
    };
    let (barrier, (a, ra), (b, rb)) =
        guard("generation 1", async { tokio::join!(m.barrier(1), follow(w1, 1), follow(w2, 1)) }).await;
    assert_eq!(barrier.unwrap().generation, 1);
    assert_eq!((ra.generation, rb.generation), (1, 1));
    assert_eq!((a.generation(), b.generation()), (1, 1));
    assert_eq!(m.job_view().generation(), 1);
    (w1, w2) = (a, b);

    // A worker asks for generation 2 itself (a job-scope restart); the master runs the barrier.
    let asking = tokio::spawn(async move {
        let r = w1.rejoin(2).await;
        (w1, r)
    });
    let e = event(&mut m, "a rejoin request", |e| matches!(e, ControlEvent::Rejoin { .. })).await;
    assert_eq!(e, ControlEvent::Rejoin { index: 1, generation: 2 });
    let (barrier, (w2b, r2)) = guard("generation 2", async { tokio::join!(m.barrier(2), follow(w2, 2)) }).await;
    assert_eq!(barrier.unwrap().generation, 2);
    assert_eq!(r2.generation, 2);
    let (mut w1, r1) = guard("the asking worker", asking).await.unwrap();
    assert_eq!(r1.unwrap().generation, 2);
    w2 = w2b;

    assert!(matches!(m.barrier(1).await, Err(RendezvousError::StaleGeneration { requested: 1, current: 2 })));

    m.order(Order::Stop { reason: "job finished".into() }).await.unwrap();
    for w in [&mut w1, &mut w2] {
        assert_eq!(guard("stop", w.next_order()).await, Some(Order::Stop { reason: "job finished".into() }));
    }
}

#[tokio::test]
async fn a_stop_during_a_rejoin_is_reported() {
    let mut m = master(3, cfg()).await;
    let w1 = spawn_join(at(&m), identity(1, 3), cfg());
    let w2 = spawn_join(at(&m), identity(2, 3), cfg());
    guard("the barrier", m.barrier(0)).await.unwrap();
    let mut w1 = joined(w1).await.unwrap();
    let _w2 = joined(w2).await.unwrap();
    let rejoin = tokio::spawn(async move { w1.rejoin(1).await.err().map(|e| e.to_string()) });
    event(&mut m, "a rejoin request", |e| matches!(e, ControlEvent::Rejoin { .. })).await;
    m.order(Order::Stop { reason: "the master gave up".into() }).await.unwrap();
    let e = guard("rejoin", rejoin).await.unwrap().expect("an error");
    assert!(e.ends_with("ordered a stop: the master gave up"), "{e}");
}

// Issue 15: hostile or confused peers.

async fn admitted_raw(to: &(String, u16), index: u32, count: u32) -> Raw {
    let mut raw = Raw::connect(to).await;
    raw.send(&raw_hello(index, count)).await;
    assert!(matches!(raw.recv().await, Some(Frame::Admitted { .. })), "raw {index} admitted");
    raw
}

#[tokio::test]
async fn a_reconnecting_replica_replaces_its_stale_connection() {
    let mut m = master(3, cfg()).await;
    let to = at(&m);
    // The first connection stays open but silent on our side: half-open as the master sees it.
    let mut stale = admitted_raw(&to, 1, 3).await;
    joined_event(&mut m, 1).await;
    let mut fresh = admitted_raw(&to, 1, 3).await;
    assert_eq!(stale.recv().await, None, "the master closed the stale connection");
    let _w2 = admitted_raw(&to, 2, 3).await;
    assert_eq!(guard("the barrier", m.barrier(0)).await.unwrap().generation, 0);
    assert_eq!(fresh.recv().await, Some(Frame::Release { generation: 0 }));
    // Another node claiming index 1 while its holder is alive (it beats, as a worker does) is a
    // duplicate: a live holder is never displaced.
    let Raw { reader: _keep, mut write } = fresh;
    let beats = tokio::spawn(async move {
        let beat = encode(&Frame::Heartbeat, DEFAULT_MAX_FRAME).unwrap();
        while write.write_all(&beat).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut other = Raw::connect(&to).await;
    other.send(&hello_from(1, 3, "elsewhere")).await;
    assert_eq!(other.error().await, "replica_index 1 is already held by a connected peer");
    beats.abort();
}

fn hello_from(index: u32, count: u32, node: &str) -> Frame {
    let mut h = raw_hello(index, count);
    if let Frame::Hello(ref mut hello) = h {
        hello.node = node.into();
    }
    h
}

/// Issue 24, item 5: a pod recreated on another node while its old node died silently (the old
/// connection half-open) waits while the master checks the holder, then takes its place when the
/// holder stays silent past the heartbeat limit; it is not refused at once (which cost a restart).
#[tokio::test]
async fn a_replica_recreated_on_another_node_takes_the_place_of_a_silent_holder() {
    // Three replicas, so that nothing is released before the recreated one is in.
    let mut m = master(3, cfg()).await;
    let to = at(&m);
    // The holder is admitted and then says nothing: its node died without closing the connection.
    let mut dead = admitted_raw(&to, 1, 3).await;
    joined_event(&mut m, 1).await;
    let recreated = Member { node: "node-new".into(), ..identity(1, 3) };
    let w = spawn_join(to.clone(), recreated, cfg());
    event(&mut m, "the silent holder dropped", |e| matches!(e, ControlEvent::Lost { index: 1, .. })).await;
    joined_event(&mut m, 1).await;
    let _w2 = admitted_raw(&to, 2, 3).await;
    assert_eq!(guard("the barrier", m.barrier(0)).await.unwrap().generation, 0);
    let session = joined(w).await.expect("the recreated replica is admitted and released");
    assert_eq!(session.generation(), 0);
    assert_eq!(m.job_view().replicas()[&1].node, "node-new");
    assert_eq!(dead.recv().await, None, "the master closed the dead holder's connection");
}

#[tokio::test]
async fn under_replica_scope_a_rejoin_restarts_nothing() {
    let mut m = master_scoped(2, healthy().fixed(), cfg(), RestartScope::Replica).await;
    let mut w = admitted_raw(&at(&m), 1, 2).await;
    guard("the barrier", m.barrier(0)).await.unwrap();
    assert_eq!(w.recv().await, Some(Frame::Release { generation: 0 }));
    w.send(&Frame::Rejoin { generation: 1 }).await;
    let e = w.error().await;
    assert!(e.starts_with("rejoin of generation 1 refused: the restart scope is replica"), "{e}");
    // The connection stays; nothing was asked of the supervisor.
    w.send(&Frame::Heartbeat).await;
    while let Ok(ev) = m.events.try_recv() {
        assert!(!matches!(ev, ControlEvent::Rejoin { .. }), "a rejoin event under replica scope: {ev:?}");
    }
    assert_eq!(m.job_view().generation(), 0);
}

#[tokio::test]
async fn generations_cannot_jump_or_wrap() {
    let mut m = master(2, cfg()).await;
    let mut w = admitted_raw(&at(&m), 1, 2).await;
    guard("the barrier", m.barrier(0)).await.unwrap();
    assert_eq!(w.recv().await, Some(Frame::Release { generation: 0 }));
    for g in [u64::MAX, 2] {
        w.send(&Frame::Rejoin { generation: g }).await;
        let e = w.error().await;
        assert_eq!(e, format!("rejoin of generation {g} refused: the current generation is 0: expected at most 1"));
    }
    w.send(&Frame::Rejoin { generation: 1 }).await;
    let e = event(&mut m, "a rejoin request", |e| matches!(e, ControlEvent::Rejoin { .. })).await;
    assert_eq!(e, ControlEvent::Rejoin { index: 1, generation: 1 });
}

#[tokio::test]
async fn an_unauthenticated_peer_learns_nothing_from_a_refusal() {
    let m = master(4, cfg()).await;
    let mut raw = Raw::connect(&at(&m)).await;
    let mut h = raw_hello(9, 4);
    if let Frame::Hello(ref mut hello) = h {
        hello.job = "guess".into();
    }
    raw.send(&h).await;
    assert_eq!(raw.error().await, "job \"guess\" does not match the master's job");
    let mut raw = Raw::connect(&at(&m)).await;
    raw.send(&raw_hello(9, 4)).await;
    assert_eq!(raw.error().await, "replica_index 9 is out of range");
}

/// A hand-driven master: accepts one worker and answers its hello with `answer`.
async fn fake_master(answer: Frame) -> ((String, u16), JoinHandle<Option<Frame>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (read, mut write) = stream.into_split();
        let mut reader = FrameReader::new(read, DEFAULT_MAX_FRAME);
        assert!(matches!(recv(&mut reader).await, Some(Frame::Hello(_))));
        write.write_all(&encode(&answer, DEFAULT_MAX_FRAME).unwrap()).await.unwrap();
        write.write_all(&encode(&Frame::Release { generation: u64::MAX }, DEFAULT_MAX_FRAME).unwrap()).await.unwrap();
        recv(&mut reader).await
    });
    (("127.0.0.1".to_string(), port), task)
}

#[tokio::test]
async fn a_worker_refuses_a_generation_beyond_the_bound() {
    let (to, master) = fake_master(Frame::Admitted { generation: u64::MAX, proof: None }).await;
    let e = joined(spawn_join(to, identity(1, 2), cfg())).await.err().expect("refused").to_string();
    assert!(e.contains("admitted frame with generation 18446744073709551615: expected at most 4294967296"), "{e}");
    let told = guard("the fake master", master).await.unwrap();
    assert!(matches!(told, Some(Frame::Error { .. })), "{told:?}");
}
