//! A host of the test's own: a network namespace with a veth pair to this one, so a
//! process in it listens on its fixed ports (the ones a deployment uses, free there
//! whatever this machine runs) and is reached from another address, as a kubelet or a
//! gateway reaches a pod. Needs root (`ip netns`); CI runs as root.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};

/// A network namespace, its address, and this side's address on the veth pair;
/// deleted when dropped.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
    /// The namespace's side of the pair.
    pub addr: Ipv4Addr,
    /// This side of the pair (reachable from the namespace).
    pub host: Ipv4Addr,
    /// `/etc/netns/<name>`: files `ip netns exec` mounts over `/etc` (its `hosts`).
    etc: PathBuf,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip (iproute2) runs");
    assert!(
        out.status.success(),
        "ip {}: {} (these tests need root for network namespaces)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

impl Netns {
    /// [`Netns::new`], or `None` (having said so in one line) where namespaces cannot
    /// be made: not root, or no `ip` (iproute2). `test` names the test that skips.
    pub fn or_skip(test: &str, hosts: &[&str]) -> Option<Netns> {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let ip = Command::new("ip").arg("-V").output().is_ok();
        if !(root && ip) {
            let why = if root {
                "no `ip` (iproute2)"
            } else {
                "not root"
            };
            eprintln!(
                "{test}: skipped: it needs a network namespace (`ip netns`, as root), and \
                 this run has {why}; scripts/test as root runs it"
            );
            return None;
        }
        Some(Netns::new(hosts))
    }

    /// A new namespace with loopback up and a /30 to this namespace; `hosts` are
    /// `/etc/hosts` lines inside it (`{host}` stands for this side's address).
    pub fn new(hosts: &[&str]) -> Netns {
        static N: AtomicU8 = AtomicU8::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed) % 4;
        let pid = std::process::id();
        // A /30 of its own per process and namespace: tests run side by side.
        let (b, c) = (100 + (pid / 63 % 100) as u8, ((pid % 63) as u8) * 4 + n);
        let (host, addr) = (Ipv4Addr::new(10, b, c, 1), Ipv4Addr::new(10, b, c, 2));
        let name = format!("spw{pid}n{n}");
        let (outside, inside) = (format!("{name}h"), format!("{name}i"));
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        let ns = Netns {
            name: name.clone(),
            addr,
            host,
            etc: PathBuf::from("/etc/netns").join(&name),
        };
        ip(&[
            "link", "add", &outside, "type", "veth", "peer", "name", &inside,
        ]);
        ip(&["link", "set", &inside, "netns", &name]);
        ip(&["addr", "add", &format!("{host}/30"), "dev", &outside]);
        ip(&["link", "set", &outside, "up"]);
        let inner = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &name, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        inner(&["addr", "add", &format!("{addr}/30"), "dev", &inside]);
        inner(&["link", "set", &inside, "up"]);
        inner(&["link", "set", "lo", "up"]);
        std::fs::create_dir_all(&ns.etc).unwrap();
        let mut lines = String::from("127.0.0.1 localhost\n");
        for line in hosts {
            lines.push_str(&line.replace("{host}", &host.to_string()));
            lines.push('\n');
        }
        std::fs::write(ns.etc.join("hosts"), lines).unwrap();
        ns
    }

    /// `program` run inside the namespace (with the environment the command is given:
    /// `ip netns exec` passes its own on).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }
}

impl Netns {
    /// Spillway as its image starts it, in this namespace: the binary under the image's
    /// name (`ratelimit`, in `dir/bin`), no arguments, exactly `env`. Its log lines, their
    /// colours removed, up to the one that says where it listens.
    pub fn start_ratelimit(
        &self,
        dir: &std::path::Path,
        env: &[(&str, String)],
    ) -> (super::Procs, Vec<String>) {
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let ratelimit = dir.join("bin/ratelimit");
        let _ = std::fs::remove_file(&ratelimit);
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_spillway"), &ratelimit).unwrap();
        let child = self
            .command(&ratelimit)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut procs = super::Procs(vec![child]);
        let log: Vec<String> = super::until_listening(&mut procs.0[0])
            .iter()
            .map(|l| super::plain(l))
            .collect();
        assert!(
            log.last().is_some_and(|l| l.contains("listening")),
            "serve exited: {log:#?}"
        );
        (procs, log)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it this one.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
        let _ = std::fs::remove_dir_all(&self.etc);
    }
}

/// `STATUS BODY` of one request to `addr:port` (a POST of `body`, or a GET), over a
/// plain socket (HTTP/1.1, Connection: close).
pub fn curl_at(addr: Ipv4Addr, port: u16, path: &str, body: Option<&str>) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(
        &(addr, port).into(),
        std::time::Duration::from_secs(5),
    )
    .unwrap_or_else(|e| panic!("{addr}:{port}: {e}"));
    let (method, body) = match body {
        Some(b) => ("POST", b),
        None => ("GET", ""),
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}:{port}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let status = response.split(' ').nth(1).unwrap_or("").to_owned();
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    format!("{status} {body}")
}
