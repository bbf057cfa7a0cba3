//! The wire: every message survives its trip, garbage is refused (never a panic, never
//! a message it was not), and descriptors arrive exactly as sent.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use znswap_wire::{
    Channel, ChannelError, DaemonStatus, ForkPage, Hello, Join, Kind, Listener, Name, Range, Reason, TenantStatus,
    ToDaemon, ToTenant, Token, WireError, MESSAGE_BYTES_MAX, RANGES_MAX, USER_END, VERSION,
};

fn range(start: u64, pages: u64) -> Range {
    Range::new(start, pages * 4096).unwrap()
}

fn to_daemon_examples() -> Vec<ToDaemon> {
    vec![
        ToDaemon::Hello(Hello {
            pid: 4242,
            forked: false,
            uffd_features: 0x1_0001,
            arena: range(0x7f00_0000_0000, 1 << 21),
            join: Join::New(Name::new("redis-server ünïcode").unwrap()),
            memory_pages: 65536,
        }),
        ToDaemon::Hello(Hello {
            pid: 1,
            forked: true,
            uffd_features: 0,
            arena: range(0x1000, 1),
            join: Join::Tenant(Token([7; 16])),
            memory_pages: u64::MAX,
        }),
        ToDaemon::Hello(Hello {
            pid: 77,
            forked: false,
            uffd_features: 0x1_0001,
            arena: range(0x7f00_0000_0000, 1 << 21),
            join: Join::ForkChild { tenant: Token([7; 16]), fork: Token([0xfe; 16]) },
            memory_pages: 0,
        }),
        ToDaemon::RegionAdd(range(0x2000_0000, 16)),
        ToDaemon::RegionRemove(range(USER_END - 4096, 1)),
        ToDaemon::Forked { child: 99 },
        ToDaemon::Discarded { batch: u64::MAX },
        ToDaemon::Bye,
        ToDaemon::ProgramDiscard(range(0x7f12_3456_0000, 3)),
        ToDaemon::Zapped { errno: 0 },
        ToDaemon::Zapped { errno: libc::EINVAL as u32 },
        ToDaemon::Open {
            name: Name::new("make").unwrap(),
            memory_pages: 16384,
            write_limit: 8 << 20,
            swap_limit_pages: 1 << 18,
        },
        ToDaemon::Status,
        ToDaemon::Forking,
        ToDaemon::ForkChild { token: Token([3; 16]) },
        ToDaemon::ForkRead(range(0x7f00_0000_1000, 1)),
    ]
}

fn to_tenant_examples() -> Vec<ToTenant> {
    vec![
        ToTenant::Welcome { tenant: 3, token: Token([0xa5; 16]), budget_pages: 65536 },
        ToTenant::Refused(Reason::NotAllowed),
        ToTenant::Refused(Reason::Full),
        ToTenant::Refused(Reason::NoMemory),
        ToTenant::Discard { batch: 1, ranges: vec![range(0x1000, 1)] },
        ToTenant::Discard {
            batch: 2,
            ranges: (0..RANGES_MAX as u64).map(|i| range(0x10_0000 + i * 0x2000, 1)).collect(),
        },
        ToTenant::Ack(Kind::RegionAdd),
        ToTenant::Ack(Kind::Forked),
        ToTenant::Ack(Kind::ProgramDiscard),
        ToTenant::Status(DaemonStatus {
            pid: 77,
            tenants: 2,
            uptime_ms: 1,
            memory_pages: 2,
            granted_pages: 3,
            resident_pages: 4,
            swap_outs: 5,
            swap_ins: 6,
            lost_pages: 7,
            host_pages_written: 8,
            gc_pages_written: 9,
            record_pages_written: 10,
            zone_resets: 11,
            device_bytes: u64::MAX,
            compressed_pool_bytes: 12,
            compressed_pool_pages_held: 13,
            compressed_pool_pages_served: 14,
            compressed_pool_stored_raw_bytes: 15,
            compressed_pool_stored_bytes: 16,
        }),
        ToTenant::ForkSnapshot { token: Token([9; 16]) },
        ToTenant::ForkPage(ForkPage::Data),
        ToTenant::ForkPage(ForkPage::Lost),
        ToTenant::Ack(Kind::ForkChild),
        ToTenant::TenantStatus(TenantStatus {
            tenant: 15,
            processes: 3,
            name: Name::new("memcached").unwrap(),
            processes_joined: 40,
            budget_pages: 1,
            resident_pages: 2,
            swap_outs: 3,
            swap_ins: 4,
            gc_bytes: 5,
            faults: 6,
            fault_p99_ns: 7,
            fault_handled_ns: 14,
            fault_lock_wait_ns: 15,
            fault_read_ns: 16,
            fault_reads: 17,
            fault_install_ns: 18,
            fault_room_wait_ns: 19,
            fault_other_wait_ns: 20,
            written_bytes: 8,
            write_limit: 9,
            throttled_ns: 10,
            grace_bytes: 11,
            swap_pages: 12,
            swap_limit_pages: 13,
        }),
    ]
}

fn encode_to_daemon(message: &ToDaemon) -> Vec<u8> {
    let mut bytes = Vec::new();
    message.encode(&mut bytes);
    bytes
}

fn encode_to_tenant(message: &ToTenant) -> Vec<u8> {
    let mut bytes = Vec::new();
    message.encode(&mut bytes);
    bytes
}

#[test]
fn every_message_decodes_to_itself() {
    for message in to_daemon_examples() {
        let bytes = encode_to_daemon(&message);
        assert!(bytes.len() <= MESSAGE_BYTES_MAX);
        assert_eq!(ToDaemon::decode(&bytes), Ok(message.clone()), "{message:?}");
        // A message sent the wrong way is an unknown kind, never another message.
        assert!(matches!(ToTenant::decode(&bytes), Err(WireError::Kind { .. })), "{message:?}");
    }
    for message in to_tenant_examples() {
        let bytes = encode_to_tenant(&message);
        assert!(bytes.len() <= MESSAGE_BYTES_MAX);
        assert_eq!(ToTenant::decode(&bytes), Ok(message.clone()), "{message:?}");
        assert!(matches!(ToDaemon::decode(&bytes), Err(WireError::Kind { .. })), "{message:?}");
    }
}

#[test]
fn every_shorter_or_longer_message_is_refused() {
    let mut all: Vec<(Vec<u8>, bool)> = to_daemon_examples().iter().map(|m| (encode_to_daemon(m), true)).collect();
    all.extend(to_tenant_examples().iter().map(|m| (encode_to_tenant(m), false)));
    for (bytes, to_daemon) in all {
        let decode =
            |b: &[u8]| if to_daemon { ToDaemon::decode(b).map(|_| ()) } else { ToTenant::decode(b).map(|_| ()) };
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "{} of {} bytes decoded", cut, bytes.len());
        }
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0; 8]);
        assert!(decode(&longer).is_err(), "a message with 8 bytes more decoded");
    }
}

#[test]
fn each_field_is_checked() {
    let hello = encode_to_daemon(&to_daemon_examples()[0]);
    let patched = |at: usize, value: &[u8]| {
        let mut bytes = hello.clone();
        bytes[at..at + value.len()].copy_from_slice(value);
        ToDaemon::decode(&bytes)
    };
    // Header: kind, length, version, reserved.
    assert_eq!(patched(0, &0x7fu16.to_le_bytes()), Err(WireError::Kind { code: 0x7f }));
    assert!(matches!(patched(2, &79u16.to_le_bytes()), Err(WireError::Length { .. })));
    assert_eq!(patched(4, &(VERSION + 1).to_le_bytes()), Err(WireError::Version { version: VERSION + 1 }));
    assert_eq!(patched(6, &1u16.to_le_bytes()), Err(WireError::Reserved { kind: Kind::Hello }));
    // Hello's body at 8: pid 4, flags 4, features 8, arena 16, token 16, name 32, memory 8.
    assert_eq!(patched(12, &4u32.to_le_bytes()), Err(WireError::Flags { kind: Kind::Hello, flags: 4 }));
    assert!(matches!(
        patched(24, &0x7f00_0000_0001u64.to_le_bytes()),
        Err(WireError::Range { why: "it is not page aligned", .. })
    ));
    assert!(matches!(patched(32, &0u64.to_le_bytes()), Err(WireError::Range { why: "it is empty", .. })));
    assert!(matches!(
        patched(24, &(USER_END - 4096).to_le_bytes()),
        Err(WireError::Range { why: "it reaches past user space", .. })
    ));
    assert!(matches!(patched(24, &(u64::MAX - 4095).to_le_bytes()), Err(WireError::Range { .. })));
    assert_eq!(patched(40, &[1]), Err(WireError::Reserved { kind: Kind::Hello }), "a token beside a name");
    assert!(matches!(patched(56, &[0xff, 0xfe]), Err(WireError::Name { why: "it is not UTF-8" })));
    assert!(matches!(patched(56, b"\n"), Err(WireError::Name { why: "it has control characters" })));
    assert!(matches!(patched(56, &[0]), Err(WireError::Name { .. })), "an empty name, or bytes after its end");
    // A name that fills all 32 bytes (no NUL) is whole.
    let full = "x".repeat(32);
    let message = ToDaemon::Hello(Hello {
        pid: 5,
        forked: false,
        uffd_features: 0,
        arena: range(0x1000, 1),
        join: Join::New(Name::new(&full).unwrap()),
        memory_pages: 0,
    });
    assert_eq!(ToDaemon::decode(&encode_to_daemon(&message)), Ok(message));
    assert!(Name::new(&"x".repeat(33)).is_err());

    // A discard: count against bytes, each range.
    let discard = encode_to_tenant(&ToTenant::Discard { batch: 9, ranges: vec![range(0x1000, 1), range(0x3000, 2)] });
    let patched = |at: usize, value: &[u8]| {
        let mut bytes = discard.clone();
        bytes[at..at + value.len()].copy_from_slice(value);
        ToTenant::decode(&bytes)
    };
    assert!(matches!(patched(16, &3u32.to_le_bytes()), Err(WireError::Count { count: 3, .. })));
    assert!(matches!(patched(16, &0u32.to_le_bytes()), Err(WireError::Count { count: 0, .. })));
    assert_eq!(patched(20, &1u32.to_le_bytes()), Err(WireError::Reserved { kind: Kind::Discard }));
    assert!(matches!(patched(40, &0x3001u64.to_le_bytes()), Err(WireError::Range { .. })));
    // Refusal reasons and acknowledgements name only what exists.
    let refused = encode_to_tenant(&ToTenant::Refused(Reason::Version));
    let mut bad = refused.clone();
    bad[8..12].copy_from_slice(&77u32.to_le_bytes());
    assert_eq!(ToTenant::decode(&bad), Err(WireError::Reason { code: 77 }));
    let ack = encode_to_tenant(&ToTenant::Ack(Kind::RegionRemove));
    let mut bad = ack.clone();
    bad[8..10].copy_from_slice(&(Kind::Hello as u16).to_le_bytes());
    assert_eq!(ToTenant::decode(&bad), Err(WireError::Ack { code: Kind::Hello as u16 }));
    // A fork's read is one page; its answer one of three.
    let read = encode_to_daemon(&ToDaemon::ForkRead(range(0x1000, 1)));
    let mut bad = read.clone();
    bad[16..24].copy_from_slice(&8192u64.to_le_bytes());
    assert!(matches!(ToDaemon::decode(&bad), Err(WireError::Range { why: "it is not one page", .. })));
    let page = encode_to_tenant(&ToTenant::ForkPage(ForkPage::Zero));
    let mut bad = page.clone();
    bad[8..12].copy_from_slice(&4u32.to_le_bytes());
    assert_eq!(ToTenant::decode(&bad), Err(WireError::ForkPage { code: 4 }));
    // A tenant's status names it as a Hello does.
    let status = encode_to_tenant(&to_tenant_examples().into_iter().last().unwrap());
    let mut bad = status.clone();
    bad[16] = b'\t';
    assert!(matches!(ToTenant::decode(&bad), Err(WireError::Name { why: "it has control characters" })));
    let open = encode_to_daemon(&ToDaemon::Open {
        name: Name::new("make").unwrap(),
        memory_pages: 1,
        write_limit: 0,
        swap_limit_pages: 0,
    });
    let mut bad = open.clone();
    bad[8] = 0;
    assert!(matches!(ToDaemon::decode(&bad), Err(WireError::Name { .. })), "an Open names its tenant");
    for reason in Reason::ALL {
        assert!(!reason.explain().is_empty());
        let refused = ToTenant::Refused(reason);
        assert_eq!(ToTenant::decode(&encode_to_tenant(&refused)), Ok(refused));
    }
}

#[test]
fn random_and_mutated_bytes_never_panic_and_decode_only_to_what_they_encode() {
    let seed = 0x77_1e5e;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let valid: Vec<Vec<u8>> = to_daemon_examples()
        .iter()
        .map(encode_to_daemon)
        .chain(to_tenant_examples().iter().map(encode_to_tenant))
        .collect();
    let mut decoded = 0;
    for round in 0..200_000u64 {
        let bytes = if round % 2 == 0 {
            let len = (rng.next_u32() as usize) % (MESSAGE_BYTES_MAX + 8);
            let mut bytes = vec![0u8; len];
            rng.fill_bytes(&mut bytes);
            bytes
        } else {
            // A valid message with a few bytes flipped.
            let mut bytes = valid[(rng.next_u32() as usize) % valid.len()].clone();
            for _ in 0..1 + rng.next_u32() % 3 {
                let at = (rng.next_u32() as usize) % bytes.len();
                bytes[at] ^= 1 << (rng.next_u32() % 8);
            }
            bytes
        };
        // Whatever decodes must encode back to exactly the bytes it came from: no two
        // byte strings mean one message.
        if let Ok(message) = ToDaemon::decode(&bytes) {
            assert_eq!(encode_to_daemon(&message), bytes, "seed {seed:#x} round {round}");
            decoded += 1;
        }
        if let Ok(message) = ToTenant::decode(&bytes) {
            assert_eq!(encode_to_tenant(&message), bytes, "seed {seed:#x} round {round}");
            decoded += 1;
        }
    }
    // Flipped bits in counters and pids still decode; the check above is not vacuous.
    assert!(decoded > 1000, "seed {seed:#x}: only {decoded} mutated messages decoded");
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let (read, write) = std::io::pipe().unwrap();
    (read.into(), write.into())
}

fn inode(fd: &OwnedFd) -> u64 {
    // SAFETY: a zeroed stat is a valid buffer; the descriptor is open.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) }, 0);
    stat.st_ino
}

#[test]
fn a_hello_arrives_with_its_descriptors_close_on_exec() {
    let (tenant, daemon) = Channel::pair().unwrap();
    let (a, _a_write) = pipe();
    let (b, _b_write) = pipe();
    let (c, _c_write) = pipe();
    let hello = to_daemon_examples().remove(0);
    tenant.send_to_daemon(&hello, &[a.as_fd(), b.as_fd(), c.as_fd()]).unwrap();
    let (got, fds) = daemon.recv_to_daemon().unwrap().unwrap();
    assert_eq!(got, hello);
    assert_eq!(fds.len(), 3);
    assert_eq!(
        (inode(&fds[0]), inode(&fds[1]), inode(&fds[2])),
        (inode(&a), inode(&b), inode(&c)),
        "the same files, in order"
    );
    for fd in &fds {
        // SAFETY: an open descriptor.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
        assert!(flags & libc::FD_CLOEXEC != 0, "received close-on-exec");
    }
    // The peer is this process (a socket pair's credentials are its maker's).
    let peer = daemon.peer().unwrap();
    // SAFETY: plain system calls.
    assert_eq!((peer.pid, peer.uid), (unsafe { libc::getpid() }, unsafe { libc::getuid() }));

    // Replies, then the end of the connection.
    for message in to_tenant_examples() {
        daemon.send_to_tenant(&message).unwrap();
        assert_eq!(tenant.recv_to_tenant().unwrap(), Some(message));
    }
    drop(daemon);
    assert_eq!(tenant.recv_to_tenant().unwrap(), None, "the daemon has gone");
}

#[test]
fn descriptors_a_message_does_not_take_are_refused_and_closed() {
    let (tenant, daemon) = Channel::pair().unwrap();
    let (read, write) = pipe();
    // A Bye with a descriptor: refused.
    let mut bytes = Vec::new();
    ToDaemon::Bye.encode(&mut bytes);
    tenant.send(&bytes, &[write.as_fd()]).unwrap();
    drop(write);
    assert!(matches!(
        daemon.recv_to_daemon(),
        Err(ChannelError::Wire(WireError::Fds { kind: Kind::Bye, want: 0, got: 1 }))
    ));
    // The received copy was closed with the refusal: the pipe's last writer is gone.
    let mut byte = [0u8; 1];
    // SAFETY: a buffer of our own.
    assert_eq!(unsafe { libc::read(read.as_raw_fd(), byte.as_mut_ptr().cast(), 1) }, 0, "end of file");

    // A Hello without its descriptors: refused.
    tenant.send(&encode_to_daemon(&to_daemon_examples()[0]), &[]).unwrap();
    assert!(matches!(daemon.recv_to_daemon(), Err(ChannelError::Wire(WireError::Fds { want: 3, got: 0, .. }))));
    // More bytes than any message: refused as truncated, not cut short.
    let huge = vec![0u8; MESSAGE_BYTES_MAX + 1];
    let mut iov = libc::iovec { iov_base: huge.as_ptr() as *mut _, iov_len: huge.len() };
    // SAFETY: a zeroed msghdr with one iovec over `huge`.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    // SAFETY: the buffers live across the call.
    assert_eq!(unsafe { libc::sendmsg(tenant.as_fd().as_raw_fd(), &header, 0) }, huge.len() as isize);
    assert!(matches!(daemon.recv_to_daemon(), Err(ChannelError::Truncated)));
    // Garbage: a decode error, the connection still usable to say why.
    tenant.send(&[1, 2, 3], &[]).unwrap();
    assert!(matches!(daemon.recv_to_daemon(), Err(ChannelError::Wire(WireError::Short { bytes: 3 }))));
    daemon.send_to_tenant(&ToTenant::Refused(Reason::BadMessage)).unwrap();
    assert_eq!(tenant.recv_to_tenant().unwrap(), Some(ToTenant::Refused(Reason::BadMessage)));
}

#[test]
fn a_listener_accepts_at_its_path_with_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("znswap.sock");
    let listener = Listener::bind(&path, 0o600).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let tenant = Channel::connect(&path).unwrap();
    let daemon = listener.accept().unwrap();
    tenant.send_to_daemon(&ToDaemon::Bye, &[]).unwrap();
    assert_eq!(daemon.recv_to_daemon().unwrap().map(|(m, _)| m), Some(ToDaemon::Bye));
    // A second daemon at the same path is refused; so is a path too long for a socket.
    assert!(Listener::bind(&path, 0o600).is_err());
    let long = dir.path().join("x".repeat(200));
    let error = Channel::connect(&long).unwrap_err();
    assert!(error.to_string().contains("must be 1 to"), "{error}");
}
