//! Just enough HTTP/1.1 for the Consul test double: keep-alive requests with a `Content-Length` body, and
//! responses written by hand, so a fault can close a connection without answering or hold it open forever.
use std::collections::HashMap;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// One parsed request.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// Percent-decoded path, e.g. `/v1/kv/service/b/leader`.
    pub path: String,
    /// Decoded query pairs; a bare flag (`?recurse`) has value `None`.
    pub query: Vec<(String, Option<String>)>,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn has(&self, flag: &str) -> bool {
        self.query.iter().any(|(k, _)| k == flag)
    }
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
    }
    /// `METHOD /path?query` as received (decoded), for the request log.
    pub fn line(&self) -> String {
        let query: Vec<String> = self
            .query
            .iter()
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={v}"),
                None => k.clone(),
            })
            .collect();
        if query.is_empty() {
            format!("{} {}", self.method, self.path)
        } else {
            format!("{} {}?{}", self.method, self.path, query.join("&"))
        }
    }
    pub fn wants_close(&self) -> bool {
        self.headers
            .get("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// A response to write.
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
    pub content_type: &'static str,
    pub index: Option<u64>,
}

impl Response {
    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        Response {
            status,
            body: value.to_string().into_bytes(),
            content_type: "application/json",
            index: None,
        }
    }
    pub fn text(status: u16, text: &str) -> Self {
        Response {
            status,
            body: text.as_bytes().to_vec(),
            content_type: "text/plain; charset=utf-8",
            index: None,
        }
    }
    pub fn with_index(mut self, index: u64) -> Self {
        // Consul never sends 0 (`setIndex` in agent/http.go maps it to 1).
        self.index = Some(index.max(1));
        self
    }
}

/// Read one request; `Ok(None)` at a clean end of stream.
pub async fn read_request<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if r.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "bad request line",
        ));
    };
    let (method, target) = (method.to_string(), target.to_string());
    let mut headers = HashMap::new();
    loop {
        line.clear();
        if r.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((k, v)) = trimmed.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).await?;
    let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), Some(decode(v))),
            None => (decode(p), None),
        })
        .collect();
    Ok(Some(Request {
        method,
        path: decode(path),
        query,
        headers,
        body,
    }))
}

pub async fn write_response<W: AsyncWrite + Unpin>(
    w: &mut W,
    resp: &Response,
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
        resp.status,
        reason(resp.status),
        resp.content_type,
        resp.body.len()
    );
    if let Some(index) = resp.index {
        head.push_str(&format!(
            "X-Consul-Index: {index}\r\nX-Consul-KnownLeader: true\r\nX-Consul-LastContact: 0\r\n"
        ));
    }
    head.push_str("\r\n");
    // One write: a head and a body written apart waited for the client's delayed ACK (40 ms) under Nagle
    // on a kept-alive connection, which a real Consul (Go sets TCP_NODELAY) never does.
    let mut out = head.into_bytes();
    out.extend_from_slice(&resp.body);
    w.write_all(&out).await?;
    w.flush().await
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        500 => "Internal Server Error",
        _ => "Unknown",
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| char::from(c).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A Go duration (`15s`, `7.5s`, `0.001s`, `500ms`, `1m30s`) in ms, fractions of a ms rounded up.
pub fn parse_go_duration_ms(s: &str) -> Option<u64> {
    let s = s.trim();
    if s == "0" {
        return Some(0);
    }
    let mut total_ns = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total_ns += value * scale;
        rest = &rest[unit_len..];
    }
    Some((total_ns / 1e6).ceil() as u64)
}
