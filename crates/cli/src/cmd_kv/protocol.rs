//! The two commands `znswap kv` needs, SET and GET, in memcached's text protocol and in
//! redis's RESP, and a connection that can pipeline them.
//!
//! memcached: `set <key> 0 0 <bytes>\r\n<data>\r\n` → `STORED\r\n`;
//! `get <key>\r\n` → `VALUE <key> <flags> <bytes>\r\n<data>\r\nEND\r\n`, or `END\r\n` for a
//! miss. Errors: `ERROR`, `CLIENT_ERROR <text>`, `SERVER_ERROR <text>`.
//! redis: commands are arrays of bulk strings (`*3\r\n$3\r\nSET\r\n$<n>\r\n<key>\r\n…`);
//! SET → `+OK\r\n`, GET → `$<n>\r\n<data>\r\n` or `$-1\r\n` for nil. Errors: `-<text>`.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

/// No value of ours comes near this; a larger length on the wire is garbage, not a reason
/// to allocate it.
const VALUE_BYTES_LIMIT: usize = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// memcached's text protocol.
    #[value(alias = "memcached")]
    Memcache,
    /// redis's RESP.
    Redis,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Memcache => "memcache",
            Protocol::Redis => "redis",
        }
    }

    pub fn default_port(self) -> u16 {
        match self {
            Protocol::Memcache => 11211,
            Protocol::Redis => 6379,
        }
    }

    /// How to start a server that `znswap kv` can fill without it evicting anything.
    fn start_hint(self, port: &str) -> String {
        match self {
            Protocol::Memcache => format!("memcached -p {port} -U 0 -m 4096 (add -u root when root)"),
            Protocol::Redis => format!("redis-server --port {port} --save '' --appendonly no"),
        }
    }

    pub fn encode_set(self, out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
        match self {
            Protocol::Memcache => {
                out.extend_from_slice(b"set ");
                out.extend_from_slice(key);
                write!(out, " 0 0 {}\r\n", value.len()).expect("writing to a Vec");
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
            Protocol::Redis => resp_command(out, &[b"SET", key, value]),
        }
    }

    pub fn encode_get(self, out: &mut Vec<u8>, key: &[u8]) {
        match self {
            Protocol::Memcache => {
                out.extend_from_slice(b"get ");
                out.extend_from_slice(key);
                out.extend_from_slice(b"\r\n");
            }
            Protocol::Redis => resp_command(out, &[b"GET", key]),
        }
    }

    /// Reads the reply to a SET: Ok only for success; a server error is an error that
    /// quotes the server.
    pub fn read_set_reply(self, reader: &mut impl BufRead, line: &mut Vec<u8>) -> Result<()> {
        read_line(reader, line)?;
        match (self, line.as_slice()) {
            (Protocol::Memcache, b"STORED") | (Protocol::Redis, b"+OK") => Ok(()),
            _ => Err(self.unexpected(line, "a SET")),
        }
    }

    /// Reads the reply to a GET of `key` into `value`: true for a value, false for a miss
    /// (memcached's bare END, redis's nil).
    pub fn read_get_reply(
        self,
        reader: &mut impl BufRead,
        key: &[u8],
        line: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<bool> {
        read_line(reader, line)?;
        match self {
            Protocol::Memcache => {
                if line == b"END" {
                    return Ok(false);
                }
                let Some(bytes) = memcache_value_header(line, key) else {
                    return Err(self.unexpected(line, "a GET"));
                };
                read_data(reader, bytes, value)?;
                read_line(reader, line)?;
                if line != b"END" {
                    return Err(self.unexpected(line, "the end of a GET"));
                }
                Ok(true)
            }
            Protocol::Redis => {
                if line == b"$-1" {
                    return Ok(false);
                }
                let bytes = line
                    .strip_prefix(b"$")
                    .and_then(|n| std::str::from_utf8(n).ok())
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|&n| n <= VALUE_BYTES_LIMIT);
                let Some(bytes) = bytes else {
                    return Err(self.unexpected(line, "a GET"));
                };
                read_data(reader, bytes, value)?;
                Ok(true)
            }
        }
    }

    /// The error for a reply that is not what `what` expects: the server's own error
    /// text when it sent one, else the reply itself.
    fn unexpected(self, line: &[u8], what: &str) -> anyhow::Error {
        let text = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
        let server_error = match self {
            Protocol::Memcache => ["ERROR", "CLIENT_ERROR", "SERVER_ERROR"].iter().any(|e| text.starts_with(e)),
            Protocol::Redis => text.starts_with('-'),
        };
        if server_error {
            anyhow!("the server answered {what} with an error: {text}")
        } else {
            anyhow!("unexpected reply to {what}: {text:?} (is this a {} server?)", self.name())
        }
    }
}

/// A RESP array of bulk strings.
fn resp_command(out: &mut Vec<u8>, parts: &[&[u8]]) {
    write!(out, "*{}\r\n", parts.len()).expect("writing to a Vec");
    for part in parts {
        write!(out, "${}\r\n", part.len()).expect("writing to a Vec");
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
}

/// `VALUE <key> <flags> <bytes>[ <cas>]` for our key: the data's length.
fn memcache_value_header(line: &[u8], key: &[u8]) -> Option<usize> {
    let mut words = line.split(|&b| b == b' ');
    if words.next()? != b"VALUE" || words.next()? != key {
        return None;
    }
    let _flags = words.next()?;
    let bytes = std::str::from_utf8(words.next()?).ok()?.parse::<usize>().ok()?;
    (bytes <= VALUE_BYTES_LIMIT).then_some(bytes)
}

/// One reply line, without its CRLF.
fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> Result<()> {
    line.clear();
    reader.read_until(b'\n', line)?;
    if line.is_empty() {
        bail!("the server closed the connection (did it exit or crash?)");
    }
    if !line.ends_with(b"\r\n") {
        bail!("the server closed the connection in the middle of a reply");
    }
    line.truncate(line.len() - 2);
    Ok(())
}

/// `bytes` of data and the CRLF after them.
fn read_data(reader: &mut impl BufRead, bytes: usize, value: &mut Vec<u8>) -> Result<()> {
    value.clear();
    value.resize(bytes, 0);
    let mut crlf = [0; 2];
    reader.read_exact(value).and_then(|()| reader.read_exact(&mut crlf)).map_err(|error| {
        if error.kind() == io::ErrorKind::UnexpectedEof {
            anyhow!("the server closed the connection in the middle of a value")
        } else {
            error.into()
        }
    })?;
    if crlf != *b"\r\n" {
        bail!("a value of {bytes} bytes is not followed by CRLF: the reply is garbled");
    }
    Ok(())
}

/// A connection to the server: commands are queued, sent together ([`Connection::send`]),
/// and their replies read in order, so a batch costs one round trip.
pub struct Connection {
    protocol: Protocol,
    addr: String,
    timeout: Duration,
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    queued: Vec<u8>,
    line: Vec<u8>,
}

impl Connection {
    pub fn open(protocol: Protocol, addr: &str, timeout: Duration) -> Result<Connection> {
        let addresses: Vec<_> = addr
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve the server address {addr:?}: give it as HOST:PORT"))?
            .collect();
        let port = addr.rsplit(':').next().unwrap_or("PORT");
        let mut last_error = None;
        for address in &addresses {
            match TcpStream::connect_timeout(address, timeout) {
                Ok(stream) => {
                    // Requests are small and each waits for its reply: send them at once.
                    stream.set_nodelay(true)?;
                    stream.set_read_timeout(Some(timeout))?;
                    stream.set_write_timeout(Some(timeout))?;
                    let reader = BufReader::with_capacity(256 << 10, stream.try_clone()?);
                    return Ok(Connection {
                        protocol,
                        addr: addr.to_string(),
                        timeout,
                        writer: stream,
                        reader,
                        queued: Vec::new(),
                        line: Vec::new(),
                    });
                }
                Err(error) => last_error = Some(error),
            }
        }
        match last_error {
            Some(error) if error.kind() == io::ErrorKind::ConnectionRefused => bail!(
                "cannot connect to {addr}: connection refused. Is the {} server running? Start one, e.g. `{}`",
                protocol.name(),
                protocol.start_hint(port)
            ),
            Some(error) => Err(error).with_context(|| format!("cannot connect to {addr}")),
            None => bail!("the server address {addr:?} resolves to no address"),
        }
    }

    pub fn queue_set(&mut self, key: &[u8], value: &[u8]) {
        self.protocol.encode_set(&mut self.queued, key, value);
    }

    pub fn queue_get(&mut self, key: &[u8]) {
        self.protocol.encode_get(&mut self.queued, key);
    }

    pub fn queued_bytes(&self) -> usize {
        self.queued.len()
    }

    /// Sends every queued command in one write.
    pub fn send(&mut self) -> Result<()> {
        let result = self.writer.write_all(&self.queued);
        self.queued.clear();
        result.map_err(|error| self.explain(error.into(), "sending commands"))
    }

    /// The reply to a SET of `key`, sent earlier.
    pub fn set_reply(&mut self, key: &[u8]) -> Result<()> {
        self.protocol
            .read_set_reply(&mut self.reader, &mut self.line)
            .map_err(|error| self.explain(error, &format!("SET {}", String::from_utf8_lossy(key))))
    }

    /// The reply to a GET of `key`, sent earlier: true and the value, or false for a miss.
    pub fn get_reply(&mut self, key: &[u8], value: &mut Vec<u8>) -> Result<bool> {
        self.protocol
            .read_get_reply(&mut self.reader, key, &mut self.line, value)
            .map_err(|error| self.explain(error, &format!("GET {}", String::from_utf8_lossy(key))))
    }

    /// Says which server and command an error came from; a timeout says so plainly.
    fn explain(&self, error: anyhow::Error, what: &str) -> anyhow::Error {
        let kind = error.downcast_ref::<io::Error>().map(io::Error::kind);
        let timed_out = matches!(kind, Some(io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut));
        let closed = matches!(
            kind,
            Some(io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionAborted)
        );
        if closed {
            error.context(format!(
                "{}: the server dropped the connection during {what} (did it exit or crash?)",
                self.addr
            ))
        } else if timed_out {
            anyhow!(
                "{}: no progress on {what} for {:.0} s (is the server stuck? raise --timeout if it is only slow)",
                self.addr,
                self.timeout.as_secs_f64()
            )
        } else {
            error.context(format!("{} server at {}, {what}", self.protocol.name(), self.addr))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn get(protocol: Protocol, reply: &[u8], key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (mut line, mut value) = (Vec::new(), Vec::new());
        let mut reader = Cursor::new(reply);
        let found = protocol.read_get_reply(&mut reader, key, &mut line, &mut value)?;
        // Every reply is read to its end, so the next one starts in the right place.
        assert_eq!(reader.position() as usize, reply.len(), "reply not read to its end");
        Ok(found.then_some(value))
    }

    fn set(protocol: Protocol, reply: &[u8]) -> Result<()> {
        protocol.read_set_reply(&mut Cursor::new(reply), &mut Vec::new())
    }

    #[test]
    fn commands_are_encoded() {
        let mut out = Vec::new();
        Protocol::Memcache.encode_set(&mut out, b"kv:1", b"a\r\nb");
        Protocol::Memcache.encode_get(&mut out, b"kv:1");
        assert_eq!(out, b"set kv:1 0 0 4\r\na\r\nb\r\nget kv:1\r\n");
        out.clear();
        Protocol::Redis.encode_set(&mut out, b"kv:1", b"xyz");
        Protocol::Redis.encode_get(&mut out, b"kv:1");
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$4\r\nkv:1\r\n$3\r\nxyz\r\n*2\r\n$3\r\nGET\r\n$4\r\nkv:1\r\n");
    }

    #[test]
    fn memcache_replies_parse() {
        let m = Protocol::Memcache;
        assert!(set(m, b"STORED\r\n").is_ok());
        let error = set(m, b"SERVER_ERROR out of memory storing object\r\n").unwrap_err().to_string();
        assert!(error.contains("with an error: SERVER_ERROR out of memory"), "{error}");
        // Values are binary: CRLF inside one is data.
        assert_eq!(get(m, b"VALUE kv:7 0 4\r\n\r\n\0\xff\r\nEND\r\n", b"kv:7").unwrap(), Some(b"\r\n\0\xff".to_vec()));
        assert_eq!(get(m, b"VALUE kv:7 0 2 99\r\nab\r\nEND\r\n", b"kv:7").unwrap(), Some(b"ab".to_vec()));
        assert_eq!(get(m, b"END\r\n", b"kv:7").unwrap(), None);
        let error = get(m, b"VALUE kv:8 0 2\r\nab\r\nEND\r\n", b"kv:7").unwrap_err().to_string();
        assert!(error.contains("unexpected reply to a GET"), "another key's value: {error}");
        let error = get(m, b"VALUE kv:7 0 3\r\nab", b"kv:7").unwrap_err().to_string();
        assert!(error.contains("closed the connection in the middle of a value"), "{error}");
        let error = get(m, b"VALUE kv:7 0 2\r\nabcd\r\nEND\r\n", b"kv:7").unwrap_err().to_string();
        assert!(error.contains("not followed by CRLF"), "{error}");
        let error = get(m, b"", b"kv:7").unwrap_err().to_string();
        assert!(error.contains("closed the connection"), "{error}");
        let error = get(m, b"+OK\r\n", b"kv:7").unwrap_err().to_string();
        assert!(error.contains("is this a memcache server?"), "{error}");
    }

    #[test]
    fn redis_replies_parse() {
        let r = Protocol::Redis;
        assert!(set(r, b"+OK\r\n").is_ok());
        let error = set(r, b"-OOM command not allowed when used memory > 'maxmemory'.\r\n").unwrap_err().to_string();
        assert!(error.contains("with an error: -OOM command not allowed"), "{error}");
        assert_eq!(get(r, b"$5\r\na\r\nbc\r\n", b"k").unwrap(), Some(b"a\r\nbc".to_vec()));
        assert_eq!(get(r, b"$0\r\n\r\n", b"k").unwrap(), Some(Vec::new()));
        assert_eq!(get(r, b"$-1\r\n", b"k").unwrap(), None);
        let error = get(r, b"-ERR wrong kind\r\n", b"k").unwrap_err().to_string();
        assert!(error.contains("-ERR wrong kind"), "{error}");
        let error = get(r, b"STORED\r\n", b"k").unwrap_err().to_string();
        assert!(error.contains("is this a redis server?"), "{error}");
        assert!(get(r, b"$99999999999\r\n", b"k").is_err(), "an absurd length is refused, not allocated");
    }

    #[test]
    fn a_refused_connection_says_to_start_the_server() {
        // A port that was free a moment ago: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let error = Connection::open(Protocol::Redis, &addr, Duration::from_secs(2)).err().unwrap().to_string();
        assert!(error.contains(&addr) && error.contains("Start one, e.g. `redis-server --port"), "{error}");
    }
}
