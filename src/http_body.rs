//! An HTTP answer's body read up to a cap: a store or a member that answers without end cannot fill memory.
//!
//! Caps: Consul 16 MiB, a peer's `/patroni` 1 MiB, a member's answer to the CLI 16 MiB. The other bounds on what
//! crosses a trust boundary: `agent/seen.rs` (departed members remembered), `api/refusals.rs` (refusal log lines per
//! interval), `pg/log_tail.rs` (the log's last 64 KiB).

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("answer larger than {max_bytes} bytes: refused")]
    TooLarge { max_bytes: usize },
    #[error("{0}")]
    Http(#[from] reqwest::Error),
}

/// The whole body, or `TooLarge` as soon as it announces or sends more than `max_bytes` (never buffering
/// more than that plus one chunk).
pub async fn read_capped(
    mut resp: reqwest::Response,
    max_bytes: usize,
) -> Result<Vec<u8>, BodyError> {
    if resp.content_length().is_some_and(|n| n > max_bytes as u64) {
        return Err(BodyError::TooLarge { max_bytes });
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > max_bytes {
            return Err(BodyError::TooLarge { max_bytes });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
