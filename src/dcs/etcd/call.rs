//! Bounding every etcd request by its caller's deadline, and reading etcd's errors as `DcsError`s.
use tokio::time::{timeout_at, Instant};

use crate::dcs::DcsError;

/// gRPC status codes (tonic's `Code` as i32; tonic is not a direct dependency).
const GRPC_NOT_FOUND: i32 = 5;
const GRPC_UNAUTHENTICATED: i32 = 16;

/// Run `fut` until `deadline`; a passed deadline is `Unavailable` (nothing may be inferred from silence).
pub(super) async fn bounded<F: std::future::Future>(
    deadline: Instant,
    what: &str,
    fut: F,
) -> Result<F::Output, DcsError> {
    // timeout_at polls the future once even past the deadline; a request must not even start then.
    if crate::clock::now() >= deadline {
        return Err(DcsError::Unavailable(format!(
            "etcd {what}: deadline already passed"
        )));
    }
    timeout_at(deadline, fut)
        .await
        .map_err(|_| DcsError::Unavailable(format!("etcd {what}: deadline passed")))
}

pub(super) fn non_negative(rev: i64) -> u64 {
    u64::try_from(rev).unwrap_or(0)
}

/// Translate an etcd client error into what the caller branches on.
pub(super) fn map_err(e: etcd_client::Error) -> DcsError {
    match &e {
        etcd_client::Error::GRpcStatus(s)
            if i32::from(s.code()) == GRPC_NOT_FOUND && s.message().contains("lease not found") =>
        {
            DcsError::SessionInvalid(s.message().to_string())
        }
        // The client's own reading of a keep-alive answered with TTL 0.
        etcd_client::Error::LeaseKeepAliveError(m) if m.contains("lease not found") => {
            DcsError::SessionInvalid(m.clone())
        }
        // Unavailable, DeadlineExceeded, transport and I/O errors, and everything we cannot interpret:
        // none of them tells us the write did not happen, so none may be read as a refusal.
        _ => DcsError::Unavailable(e.to_string()),
    }
}

/// etcd no longer accepts our auth token (`etcdserver: invalid auth token`, gRPC Unauthenticated).
pub(super) fn is_auth_rejected(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            i32::from(s.code()) == GRPC_UNAUTHENTICATED
                || s.message().contains("invalid auth token")
        }
        _ => false,
    }
}
