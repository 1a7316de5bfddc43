//! A private PostgreSQL server for tests and benches: `initdb` in a temporary directory, a
//! unix socket there and no TCP port, trust login for the `postgres` role only on that
//! socket. It is started once per process and stopped when the process exits. As root,
//! the server runs as the `postgres` system user (PostgreSQL refuses to run as root).
//!
//! `CAIRN_TEST_POSTGRES` (a connection string to a running server's `postgres` database,
//! as `.ci/run` exports) is used instead when set. Without it and without PostgreSQL's
//! binaries, [`TestCluster::shared`] says so loudly and returns `None`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use postgres::NoTls;

use super::PgUrl;

/// A server tests may create databases on.
pub struct TestCluster {
    /// Connection string to its `postgres` database.
    admin: String,
    next: AtomicU32,
}

impl TestCluster {
    /// The process's server, started on first use; `None` when there is none to be had.
    pub fn shared() -> Option<&'static TestCluster> {
        static CLUSTER: OnceLock<Option<TestCluster>> = OnceLock::new();
        CLUSTER
            .get_or_init(|| match start() {
                Ok(cluster) => Some(cluster),
                Err(why) => {
                    eprintln!(
                        "\n*** PostgreSQL tests SKIPPED: {why}. Install postgresql-15 \
                         (apt-get install postgresql-15) or set CAIRN_TEST_POSTGRES. ***\n"
                    );
                    None
                }
            })
            .as_ref()
    }

    /// A new, empty database on the server; its connection string.
    pub fn fresh_database(&self) -> PgUrl {
        let name = format!(
            "cairn_{}_{}",
            std::process::id(),
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        // On a thread of its own: the client's runtime cannot start inside a test's.
        let (admin, create) = (self.admin.clone(), format!("CREATE DATABASE {name}"));
        std::thread::spawn(move || {
            let mut client = postgres::Client::connect(&admin, NoTls)
                .unwrap_or_else(|e| panic!("connect to the test server ({admin}): {e}"));
            client
                .batch_execute(&create)
                .unwrap_or_else(|e| panic!("{create}: {e}"));
        })
        .join()
        .unwrap_or_else(|_| panic!("cannot create test database {name}"));
        format!("{} dbname={name}", self.admin)
            .parse()
            .unwrap_or_else(|e| panic!("test database URL: {e}"))
    }
}

fn start() -> Result<TestCluster, String> {
    if let Ok(admin) = std::env::var("CAIRN_TEST_POSTGRES") {
        return Ok(TestCluster {
            admin,
            next: AtomicU32::new(0),
        });
    }
    let server = Server::create("")?;
    server.start()?;
    Ok(server.cluster())
}

/// A server of a test's own, which the test may stop and start again to play an outage;
/// stopped and removed when the process exits, like the shared one.
pub struct Server {
    bin: PathBuf,
    dir: PathBuf,
    as_user: Option<String>,
}

impl Server {
    /// A new server of its own, running, and the cluster to make databases on it; `None`
    /// (said loudly) without PostgreSQL's binaries, or when the tests use a server given by
    /// `CAIRN_TEST_POSTGRES`, which they must not stop.
    pub fn own() -> Option<(Server, TestCluster)> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let made = if std::env::var_os("CAIRN_TEST_POSTGRES").is_some() {
            Err("CAIRN_TEST_POSTGRES names a server the tests must not stop".to_string())
        } else {
            let name = format!("-own{}", NEXT.fetch_add(1, Ordering::Relaxed));
            Server::create(&name).and_then(|server| server.start().map(|()| server))
        };
        match made {
            Ok(server) => {
                let cluster = server.cluster();
                Some((server, cluster))
            }
            Err(why) => {
                eprintln!("\n*** a PostgreSQL outage test is SKIPPED: {why} ***\n");
                None
            }
        }
    }

    /// `initdb` in a new temporary directory named after the process and `name`, and a
    /// watcher that stops the server and removes the directory once the process is gone.
    fn create(name: &str) -> Result<Server, String> {
        let bin = binaries().ok_or("no PostgreSQL binaries (initdb, pg_ctl) were found")?;
        let dir = std::env::temp_dir().join(format!("cairn-pg-{}{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let as_user = server_user(&dir)?;
        let server = Server { bin, dir, as_user };
        server.pg(
            "initdb",
            &[
                "-D",
                &server.data(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        stop_when_this_process_exits(server.as_user.as_deref(), &server.bin, &server.dir);
        Ok(server)
    }

    /// Start the server and wait until it takes connections.
    pub fn start(&self) -> Result<(), String> {
        let options = format!(
            "-k {} -c listen_addresses='' -c max_connections=300 -c shared_buffers=64MB",
            self.dir.display()
        );
        let log = self.dir.join("server.log").to_string_lossy().into_owned();
        self.pg(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-w",
                "-o",
                &options,
                "start",
            ],
        )
    }

    /// Stop the server as an operator's fast shutdown does: every session is ended.
    pub fn stop(&self) -> Result<(), String> {
        self.pg("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"])
    }

    fn cluster(&self) -> TestCluster {
        TestCluster {
            admin: format!("host={} user=postgres dbname=postgres", self.dir.display()),
            next: AtomicU32::new(0),
        }
    }

    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().into_owned()
    }

    fn pg(&self, program: &str, args: &[&str]) -> Result<(), String> {
        run(self.as_user.as_deref(), &self.bin.join(program), args)
    }
}

/// `CAIRN_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin` (Debian's layout).
fn binaries() -> Option<PathBuf> {
    if let Ok(bin) = std::env::var("CAIRN_PG_BIN") {
        return Some(PathBuf::from(bin));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// As root: hand `dir` to the `postgres` system user and run the server as it.
fn server_user(dir: &Path) -> Result<Option<String>, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| e.to_string())?;
    let (uid, gid) = passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&"postgres") && fields.len() > 3)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
        .ok_or("running as root, and there is no `postgres` user to run the server as")?;
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))
        .map_err(|e| format!("chown {}: {e}", dir.display()))?;
    Ok(Some("postgres".into()))
}

fn command(as_user: Option<&str>, program: &Path) -> Command {
    match as_user {
        Some(user) => {
            let mut command = Command::new("runuser");
            command.args(["-u", user, "--"]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

fn run(as_user: Option<&str>, program: &Path, args: &[&str]) -> Result<(), String> {
    let output = command(as_user, program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{} failed: {}{}",
        program.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

/// A watcher shell that stops the server and removes `dir` once this process is gone.
fn stop_when_this_process_exits(as_user: Option<&str>, bin: &Path, dir: &Path) {
    let runner = as_user.map_or(String::new(), |user| format!("runuser -u {user} -- "));
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         {runner}{pg_ctl} -D {data} -m immediate stop >/dev/null 2>&1; rm -rf {dir}",
        pid = std::process::id(),
        pg_ctl = bin.join("pg_ctl").display(),
        data = dir.join("data").display(),
        dir = dir.display(),
    );
    // In a process group of its own, so a signal to the test's group (Ctrl-C, a killed
    // `cargo test`) does not take the watcher down with it.
    let _ = Command::new("sh")
        .args(["-c", &script])
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}
