//! `dp-server` as a test starts and reaches it: the real binary on a loopback port, and
//! arrow-flight's Flight SQL client (tests/server.rs, and the server on a Ballista cluster in
//! tests/cluster_processes.rs).

use arrow::array::RecordBatch;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::FlightInfo;
use futures::TryStreamExt;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use tonic::transport::Channel;

/// A running `dp-server`, killed (SIGKILL) when dropped.
pub struct Server {
    child: Child,
    pub address: String,
    stderr: PathBuf,
}

impl Server {
    /// Starts `dp-server --config CONFIG --listen 127.0.0.1:0` and waits for its address.
    pub fn start(config: &Path) -> Server {
        Self::start_with(config, &[])
    }

    /// [`Server::start`] with more arguments (e.g. `--scheduler URL`).
    pub fn start_with(config: &Path, args: &[&str]) -> Server {
        let stderr = config.with_extension(format!("stderr.{}", rand_suffix()));
        let mut child = Command::new(env!("CARGO_BIN_EXE_dp-server"))
            .args([
                "--config",
                config.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("start dp-server");
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let line = receiver
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| {
                panic!(
                    "dp-server did not start: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                )
            });
        let address = line
            .strip_prefix("dp-server listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .split_whitespace()
            .next()
            .unwrap()
            .to_string();
        Server {
            child,
            address,
            stderr,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// What the server wrote to its standard error so far (its log).
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The server's peak resident memory so far (`VmHWM`, Linux), in bytes.
    pub fn peak_rss(&self) -> u64 {
        self.status_bytes("VmHWM:")
    }

    /// The server's resident memory now (`VmRSS`, Linux), in bytes.
    pub fn rss(&self) -> u64 {
        self.status_bytes("VmRSS:")
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A field of the server's `/proc/PID/status` given in kB, in bytes (0 if unknown).
    fn status_bytes(&self, field: &str) -> u64 {
        super::status_bytes_of(self.child.id(), field)
    }

    /// The CPU time the server's process has used so far (user and system, all threads; from
    /// `/proc/PID/stat`, Linux), in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        super::cpu_seconds_of(self.child.id())
    }

    /// The connections to its port the server's process holds open now (accepted TCP
    /// sockets, from `/proc/PID/fd` and `/proc/net/tcp`, Linux): what its clients cost it in
    /// file descriptors.
    pub fn open_connections(&self) -> usize {
        self.peers().len()
    }

    /// The peer address of each connection [`Server::open_connections`] counts.
    pub fn peers(&self) -> Vec<std::net::Ipv4Addr> {
        let held: std::collections::HashSet<String> =
            std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
                .map(|fds| {
                    fds.filter_map(Result::ok)
                        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                        .filter_map(|target| {
                            let target = target.to_string_lossy().into_owned();
                            Some(
                                target
                                    .strip_prefix("socket:[")?
                                    .strip_suffix(']')?
                                    .to_string(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
        let port = self.address.rsplit(':').next().unwrap();
        let port = format!(":{:04X}", port.parse::<u16>().unwrap());
        let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        tcp.lines()
            .skip(1)
            .filter_map(|line| {
                // sl local_address rem_address st ... inode (10th); addresses in hex, the
                // IPv4 address's bytes in memory order.
                let fields: Vec<&str> = line.split_whitespace().collect();
                let accepted = fields.len() > 9
                    && fields[1].ends_with(&port)
                    && fields[3] != "0A"
                    && held.contains(fields[9]);
                let peer = u32::from_str_radix(fields.get(2)?.split(':').next()?, 16).ok()?;
                accepted.then(|| std::net::Ipv4Addr::from(peer.to_le_bytes()))
            })
            .collect()
    }

    /// SIGKILL, as a crash or `kill -9` would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "dp-server stderr:\n{}",
                std::fs::read_to_string(&self.stderr).unwrap_or_default()
            );
        }
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

pub async fn channel(url: &str) -> Channel {
    Channel::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .expect("connect to dp-server")
}

/// A Flight SQL client logged in as `user`.
pub async fn login(
    url: &str,
    user: &str,
    password: &str,
) -> Result<FlightSqlServiceClient<Channel>, String> {
    let mut client = FlightSqlServiceClient::new(channel(url).await);
    client
        .handshake(user, password)
        .await
        .map_err(|e| e.to_string())?;
    Ok(client)
}

/// Runs `sql` and collects every endpoint's batches.
pub async fn query(
    client: &mut FlightSqlServiceClient<Channel>,
    sql: &str,
) -> Result<Vec<RecordBatch>, String> {
    let info = client
        .execute(sql.to_string(), None)
        .await
        .map_err(|e| e.to_string())?;
    fetch(client, info).await
}

pub async fn fetch(
    client: &mut FlightSqlServiceClient<Channel>,
    info: FlightInfo,
) -> Result<Vec<RecordBatch>, String> {
    let mut batches = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.expect("ticket");
        let stream = client.do_get(ticket).await.map_err(|e| e.to_string())?;
        batches.extend(
            stream
                .try_collect::<Vec<_>>()
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(batches)
}

/// HTTP/2's connection preface, which a client sends first.
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A TCP connection to `address` from the loopback address `from` (`127.0.0.x`: Linux routes
/// all of 127/8 to loopback), which sends `send` and then nothing; `None` if the connect fails.
pub async fn stranger(address: &str, from: u8, send: &[u8]) -> Option<tokio::net::TcpStream> {
    use tokio::io::AsyncWriteExt;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::from(([127, 0, 0, from], 0)))
        .unwrap();
    let mut tcp = socket.connect(address.parse().unwrap()).await.ok()?;
    // A connection the server already closed may refuse the bytes: it is idle all the same.
    let _ = tcp.write_all(send).await;
    Some(tcp)
}

/// Whether the server closes `tcp` within `limit`: a read ends (end of stream or an error),
/// past whatever the server sends first (its HTTP/2 settings after the preface).
pub async fn closed_within(tcp: &mut tokio::net::TcpStream, limit: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + limit;
    let mut buffer = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}
