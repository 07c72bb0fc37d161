//! The relay over real pipes: a writer thread stands for the child, a second pipe for rankvisor's
//! stdout.

use super::*;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc;

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe().expect("pipe")
}

/// The pipe's read end, nonblocking as the relay wants it.
fn nonblocking(fd: OwnedFd) -> OwnedFd {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    fcntl(&fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).unwrap();
    fd
}

/// Relay `r` to `out` until its end, the lines collected (nothing wakes the relay).
fn relay_all<W: Write>(out: W, r: OwnedFd, on_line: &mut impl FnMut(&str)) -> Relay<W> {
    let (wake_r, _wake_w) = pipe();
    let r = nonblocking(r);
    let mut relay = Relay::new(out);
    relay.run(r.as_fd(), wake_r.as_fd(), on_line).unwrap();
    relay
}

#[test]
fn bytes_pass_unchanged_and_complete_lines_reach_the_rules() {
    let (r, w) = pipe();
    let mut data: Vec<u8> = b"step 1\r\nbinary \xff\x00\xfe end\nprogress 10%\rprogress 20%\rlast".to_vec();
    data.extend(std::iter::repeat_n(b'z', 200_000));
    let expected = data.clone();
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::File::from(w);
        for chunk in data.chunks(777) {
            f.write_all(chunk).unwrap();
        }
    });
    let mut lines = Vec::new();
    let mut relay = relay_all(Vec::new(), r, &mut |l: &str| lines.push(l.to_string()));
    assert!(relay.take_write_error().is_none());
    let out = relay.into_output();
    writer.join().unwrap();
    assert_eq!(out, expected, "every byte, in order, unchanged");
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[..4], ["step 1\n", "binary \u{FFFD}\0\u{FFFD} end\n", "progress 10%\n", "progress 20%\n"]);
    assert!(lines[4].starts_with("lastzzz") && !lines[4].ends_with('\n'), "the unfinished last line at the end");
    assert_eq!(lines[4].len(), crate::logrules::lines::LINE_CAP, "capped");
}

#[test]
fn a_partial_line_is_written_through_before_the_rest_comes() {
    let (r, w) = pipe();
    let (out_r, out_w) = pipe();
    let (go, wait) = mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::File::from(w);
        f.write_all(b"epoch 1: loss=").unwrap();
        // The rest comes only once the partial line was seen on the other side.
        wait.recv().unwrap();
        f.write_all(b"0.5\n").unwrap();
    });
    let mut seen = std::fs::File::from(out_r);
    let mut lines = Vec::new();
    let (wake_r, _wake_w) = pipe();
    let r = nonblocking(r);
    let mut relay = Relay::new(std::fs::File::from(out_w));
    let mut got = Vec::new();
    while got.len() < 14 {
        assert_eq!(relay.step(r.as_fd(), wake_r.as_fd()).unwrap(), Step::Read);
        relay.lines(&mut |l: &str| lines.push(l.to_string()));
        let mut b = [0u8; 64];
        // The relay wrote what it read before returning: it is in the output pipe now.
        let n = seen.read(&mut b).unwrap();
        got.extend_from_slice(&b[..n]);
    }
    assert_eq!(got, b"epoch 1: loss=");
    assert!(lines.is_empty(), "no complete line yet");
    go.send(()).unwrap();
    relay.run(r.as_fd(), wake_r.as_fd(), &mut |l: &str| lines.push(l.to_string())).unwrap();
    drop(relay);
    writer.join().unwrap();
    let mut rest = Vec::new();
    seen.read_to_end(&mut rest).unwrap();
    assert_eq!(rest, b"0.5\n");
    assert_eq!(lines, ["epoch 1: loss=0.5\n"]);
}

#[test]
fn a_10_mb_line_is_relayed_whole_and_matched_on_its_first_64_kib() {
    let (r, w) = pipe();
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::File::from(w);
        let mut line = b"HEAD ".to_vec();
        line.extend(std::iter::repeat_n(b'x', 10 << 20));
        line.extend_from_slice(b" TAIL\nnext\n");
        f.write_all(&line).unwrap();
    });
    let mut lines = Vec::new();
    let mut count = CountingSink(0);
    relay_all(&mut count, r, &mut |l: &str| lines.push(l.to_string()));
    writer.join().unwrap();
    assert_eq!(count.0, 5 + (10 << 20) + 6 + 5, "every byte was written");
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].len(), crate::logrules::lines::LINE_CAP + 1);
    assert!(lines[0].starts_with("HEAD xxx") && lines[0].ends_with("x\n"));
    assert_eq!(lines[1], "next\n");
}

#[test]
fn a_closed_output_is_reported_once_and_the_child_is_still_drained() {
    for teeing in [false, true] {
        let (r, w) = pipe();
        let (out_r, out_w) = pipe();
        drop(out_r);
        let writer = std::thread::spawn(move || {
            let mut f = std::fs::File::from(w);
            for i in 0..2000 {
                writeln!(f, "line {i} {}", "y".repeat(100)).unwrap();
            }
        });
        let mut n = 0;
        let (wake_r, _wake_w) = pipe();
        let r = nonblocking(r);
        let out = std::fs::File::from(out_w);
        let mut relay = if teeing { Relay::teeing(out) } else { Relay::new(out) };
        assert_eq!(relay.is_teeing(), teeing);
        relay.run(r.as_fd(), wake_r.as_fd(), &mut |_: &str| n += 1).unwrap();
        let e = relay.take_write_error().expect("EPIPE");
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        assert!(relay.take_write_error().is_none(), "once");
        writer.join().unwrap();
        assert_eq!(n, 2000, "every line still evaluated (teeing: {teeing})");
    }
}

/// Counts what is written, keeping nothing.
struct CountingSink(usize);

impl Write for CountingSink {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0 += b.len();
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_wake_byte_or_a_closed_wake_end_is_told_apart_from_output() {
    let (r, w) = pipe();
    let (wake_r, wake_w) = pipe();
    let r = nonblocking(r);
    let mut relay = Relay::new(Vec::new());
    nix::unistd::write(&wake_w, &[1]).unwrap();
    assert_eq!(relay.step(r.as_fd(), wake_r.as_fd()).unwrap(), Step::Woken { closed: false });
    assert_eq!(relay.read_now(r.as_fd()).unwrap(), Step::Empty, "nothing written yet");
    nix::unistd::write(&w, b"a\nb").unwrap();
    assert_eq!(relay.read_now(r.as_fd()).unwrap(), Step::Read);
    let mut lines = Vec::new();
    relay.lines(&mut |l: &str| lines.push(l.to_string()));
    assert_eq!(lines, ["a\n"]);
    drop(wake_w);
    assert_eq!(relay.step(r.as_fd(), wake_r.as_fd()).unwrap(), Step::Woken { closed: true });
    drop(w);
    assert_eq!(relay.read_now(r.as_fd()).unwrap(), Step::Eof);
    relay.finish(&mut |l: &str| lines.push(l.to_string()));
    assert_eq!(lines, ["a\n", "b"]);
    assert_eq!(relay.into_output(), b"a\nb");
}

/// Reads `r` to its end on a thread of its own.
fn drain(r: OwnedFd) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut got = Vec::new();
        std::fs::File::from(r).read_to_end(&mut got).unwrap();
        got
    })
}

#[test]
fn a_child_writing_in_bulk_is_teed_into_a_pipe_output_and_every_byte_gets_there_unchanged() {
    let (r, w) = pipe();
    let (out_r, out_w) = pipe();
    assert!(!Relay::teeing(std::fs::File::open("/proc/self/status").unwrap()).is_teeing(), "a file is written");
    let mut data: Vec<u8> = b"step 1\r\nbinary \xff\x00\xfe end\nno newline yet".to_vec();
    for i in 0..20_000 {
        data.extend_from_slice(format!("line {i} loss={}\n", i % 7).as_bytes());
    }
    data.extend_from_slice(b"last, unfinished");
    let expected = data.clone();
    // Whole pages, so that the input pipe fills to its 64 KiB.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = std::thread::spawn({
        let done = done.clone();
        move || {
            let mut f = std::fs::File::from(w);
            for chunk in data.chunks(4096) {
                f.write_all(chunk).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let reader = drain(out_r);
    let r = nonblocking(r);
    let mut relay = Relay::teeing(std::fs::File::from(out_w));
    assert!(relay.is_teeing(), "the output is a pipe");
    let mut lines = Vec::new();
    loop {
        // Each read a full pipe (the child writing in bulk), until the writer is done.
        let full = || pending(&r) == 65536 || done.load(std::sync::atomic::Ordering::SeqCst);
        wait_for(full);
        match relay.read_now(r.as_fd()).unwrap() {
            Step::Read => relay.lines(&mut |l: &str| lines.push(l.to_string())),
            Step::Eof => break,
            Step::Empty | Step::Woken { .. } => {}
        }
    }
    relay.finish(&mut |l: &str| lines.push(l.to_string()));
    assert!(relay.teed() > 0, "the reads after a full one were teed");
    assert!(relay.take_write_error().is_none());
    drop(relay);
    writer.join().unwrap();
    assert_eq!(reader.join().unwrap(), expected, "every byte, in order, unchanged");
    assert_eq!(lines.len(), 20_003);
    assert_eq!(lines[1], "binary \u{FFFD}\0\u{FFFD} end\n");
    assert_eq!(lines[2], "no newline yetline 0 loss=0\n");
    assert_eq!(lines[20_002], "last, unfinished");
}

#[test]
fn a_child_writing_a_line_now_and_then_is_written_and_the_output_pipe_packs_its_lines() {
    let (r, w) = pipe();
    let (out_r, out_w) = pipe();
    // Nobody reads the output, and a write that would wait fails: teeing each line would take
    // one of the pipe's sixteen slots a line and fail at the seventeenth.
    let out_w = std::fs::File::from(out_w);
    nix::fcntl::fcntl(&out_w, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
    let (wake_r, _wake_w) = pipe();
    let r = nonblocking(r);
    let mut w = std::fs::File::from(w);
    let mut relay = Relay::teeing(out_w);
    assert!(relay.is_teeing());
    let mut total = 0;
    for i in 0..100 {
        let line = format!("step {i}: loss=0.5\n");
        w.write_all(line.as_bytes()).unwrap();
        total += line.len();
        assert_eq!(relay.step(r.as_fd(), wake_r.as_fd()).unwrap(), Step::Read);
        let mut got = Vec::new();
        relay.lines(&mut |l: &str| got.push(l.to_string()));
        assert_eq!(got, [line]);
    }
    assert!(relay.take_write_error().is_none(), "no write had to wait");
    assert_eq!(relay.teed(), 0, "small reads are written, not teed");
    assert_eq!(pending(&out_r) as usize, total, "all in the output pipe");
}

#[test]
fn a_full_output_pipe_is_written_to_when_it_has_room_and_the_order_is_kept() {
    let (r, w) = pipe();
    let (out_r, out_w) = pipe();
    let mut out_w = std::fs::File::from(out_w);
    // The output pipe full: a tee would have to wait, so the relay reads and its write waits.
    nix::fcntl::fcntl(&out_w, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
    let mut prefix = 0;
    while let Ok(n) = out_w.write(&[b'P'; 4096]) {
        prefix += n;
    }
    nix::fcntl::fcntl(&out_w, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty())).unwrap();
    let mut w = std::fs::File::from(w);
    w.write_all(b"first line\nsecond").unwrap();
    let r = nonblocking(r);
    let relay = std::thread::spawn(move || {
        let (wake_r, _wake_w) = pipe();
        let mut relay = Relay::teeing(out_w);
        assert!(relay.is_teeing());
        let mut lines = Vec::new();
        relay.run(r.as_fd(), wake_r.as_fd(), &mut |l: &str| lines.push(l.to_string())).unwrap();
        (relay.is_teeing(), lines)
    });
    // The relay took the input (read, not teed: the output had no room) while the output is
    // still full; only then is the output drained and the rest written.
    wait_for(|| pending(&w) == 0);
    let reader = drain(out_r);
    w.write_all(b" half\nthird\n").unwrap();
    drop(w);
    let (teeing, lines) = relay.join().unwrap();
    assert!(teeing, "a full output does not turn teeing off");
    let mut expected = vec![b'P'; prefix];
    expected.extend_from_slice(b"first line\nsecond half\nthird\n");
    assert_eq!(reader.join().unwrap(), expected);
    assert_eq!(lines, ["first line\n", "second half\n", "third\n"]);
}

/// The bytes waiting in the pipe `fd` is an end of (FIONREAD).
fn pending(fd: &impl std::os::fd::AsRawFd) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int, the one given.
    assert_eq!(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) }, 0);
    n
}

/// Until `ready` holds (another thread makes it so), yielding the core meanwhile.
fn wait_for(mut ready: impl FnMut() -> bool) {
    while !ready() {
        std::thread::yield_now();
    }
}
