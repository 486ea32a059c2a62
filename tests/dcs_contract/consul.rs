//! The contract run against the Consul test double and, when `CONSUL_HTTP_ADDR` is set, a real Consul; plus the
//! test double's own checks against the semantics in consul.md.
use async_trait::async_trait;
use tenure::dcs::consul::{ConsulDcs, ConsulSettings};
use tenure::dcs::Dcs;

use crate::contract::{Backend, Fault};
use crate::support::consul_server::{ConsulTestOptions, ConsulTestServer, Fault as ServerFault};

/// The test double with `session_ttl_min` lowered so a 1 s HA ttl (500 ms session TTL) is accepted.
pub struct TestDouble {
    server: ConsulTestServer,
}

#[async_trait]
impl Backend for TestDouble {
    async fn make_client(&self, scope: &str, name: &str, ttl_ms: u64) -> Box<dyn Dcs> {
        let settings = ConsulSettings::new(&self.server.url(), scope, name, ttl_ms);
        Box::new(ConsulDcs::new(settings).expect("client"))
    }
    fn ttl_ms(&self) -> u64 {
        1_000
    }
    fn expiry_window_ms(&self, ttl_ms: u64) -> (u64, u64) {
        // Session TTL is ttl/2; Consul (and the double) reap somewhere in [TTL, 2·TTL].
        (ttl_ms / 2, ttl_ms)
    }
    async fn set_fault(&self, fault: Fault) -> bool {
        self.server.set_fault(match fault {
            Fault::Healthy => ServerFault::None,
            Fault::Frozen => ServerFault::Freeze,
            Fault::NoLeader => ServerFault::NoLeader,
            Fault::DropConnections => ServerFault::DropConnections,
        });
        true
    }
}

pub async fn test_double() -> Option<TestDouble> {
    let opts = ConsulTestOptions {
        session_ttl_min_ms: 100,
        ..ConsulTestOptions::default()
    };
    Some(TestDouble {
        server: ConsulTestServer::start(opts).await,
    })
}

/// A real Consul agent from the standard environment (`CONSUL_HTTP_ADDR`, `CONSUL_HTTP_TOKEN`). Its minimum
/// session TTL is 10 s unless lowered, so the HA ttl is 20 s and the expiry cases take that long.
pub struct RealConsul {
    url: String,
    token: Option<String>,
}

#[async_trait]
impl Backend for RealConsul {
    async fn make_client(&self, scope: &str, name: &str, ttl_ms: u64) -> Box<dyn Dcs> {
        let mut settings = ConsulSettings::new(&self.url, scope, name, ttl_ms);
        settings.token = self.token.clone();
        Box::new(ConsulDcs::new(settings).expect("client"))
    }
    fn ttl_ms(&self) -> u64 {
        20_000
    }
    fn expiry_window_ms(&self, ttl_ms: u64) -> (u64, u64) {
        (ttl_ms / 2, ttl_ms)
    }
}

pub async fn real_consul() -> Option<RealConsul> {
    let Ok(addr) = std::env::var("CONSUL_HTTP_ADDR") else {
        eprintln!("CONSUL_HTTP_ADDR is not set: skipping the contract against a real Consul");
        return None;
    };
    let url = if addr.contains("://") {
        addr
    } else {
        format!("http://{addr}")
    };
    Some(RealConsul {
        url,
        token: std::env::var("CONSUL_HTTP_TOKEN").ok(),
    })
}

mod double {
    contract_tests!(crate::consul::test_double);
}

mod real {
    contract_tests!(crate::consul::real_consul);
}
