//! Who may call the mutating endpoints: basic auth or a bearer token from the settings, compared in
//! constant time; nobody when none is configured, unless `allow_unauthenticated` says everybody.
use base64::Engine as _;

use super::settings::RestApiSettings;

/// The credentials a mutating request must present.
#[derive(Clone)]
pub struct Auth {
    basic: Option<(String, String)>,
    token: Option<String>,
    open: bool,
}

/// Why a request was refused: 401 with a challenge for missing and for wrong credentials (as Patroni
/// and RFC 7235), 403 when none are configured (nobody may call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    Missing,
    Wrong,
    NotConfigured,
}

impl Denied {
    pub fn status(self) -> u16 {
        match self {
            Denied::Missing | Denied::Wrong => 401,
            Denied::NotConfigured => 403,
        }
    }
    pub fn message(self) -> &'static str {
        match self {
            // Patroni's texts (api.py `check_auth_header`).
            Denied::Missing => "no auth header received",
            Denied::Wrong => "not authenticated",
            Denied::NotConfigured => {
                "the control endpoints are disabled: no credentials are configured \
                 (set restapi username/password or token, or allow_unauthenticated)"
            }
        }
    }
}

impl Auth {
    pub fn from_settings(s: &RestApiSettings) -> Self {
        let basic = match (&s.username, &s.password) {
            (Some(u), Some(p)) => Some((u.clone(), p.clone())),
            (Some(u), None) => Some((u.clone(), String::new())),
            _ => None,
        };
        Auth {
            basic,
            token: s.token.clone().filter(|t| !t.is_empty()),
            open: s.allow_unauthenticated,
        }
    }

    /// Whether the mutating endpoints are open to anyone.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Whether any credential is configured.
    pub fn has_credentials(&self) -> bool {
        self.basic.is_some() || self.token.is_some()
    }

    /// The `WWW-Authenticate` challenge of a 401: Patroni's realm, so clients that match on it keep working.
    pub fn challenge(&self) -> &'static str {
        match (&self.basic, &self.token) {
            (None, Some(_)) => "Bearer realm=\"Patroni\"",
            _ => "Basic realm=\"Patroni\"",
        }
    }

    /// Check the `Authorization` header of a mutating request.
    pub fn check(&self, authorization: Option<&[u8]>) -> Result<(), Denied> {
        if self.open {
            return Ok(());
        }
        if !self.has_credentials() {
            return Err(Denied::NotConfigured);
        }
        let header = authorization.ok_or(Denied::Missing)?;
        let header = std::str::from_utf8(header)
            .map_err(|_| Denied::Wrong)?
            .trim();
        let (scheme, value) = header.split_once(' ').ok_or(Denied::Wrong)?;
        let value = value.trim();
        let ok = if scheme.eq_ignore_ascii_case("basic") {
            self.basic_ok(value)
        } else if scheme.eq_ignore_ascii_case("bearer") {
            self.token
                .as_ref()
                .is_some_and(|t| same(t.as_bytes(), value.as_bytes()))
        } else {
            false
        };
        if ok {
            Ok(())
        } else {
            Err(Denied::Wrong)
        }
    }

    fn basic_ok(&self, value: &str) -> bool {
        let Some((user, pass)) = &self.basic else {
            return false;
        };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(value) else {
            return false;
        };
        let expected = format!("{user}:{pass}");
        same(expected.as_bytes(), &decoded)
    }
}

/// Equality whose time does not depend on where the inputs first differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(user: Option<&str>, token: Option<&str>) -> Auth {
        let mut s = RestApiSettings::new("127.0.0.1:0".parse().unwrap());
        s.username = user.map(str::to_string);
        s.password = user.map(|_| "pw".to_string());
        s.token = token.map(str::to_string);
        Auth::from_settings(&s)
    }

    #[test]
    fn basic_and_bearer() {
        let a = auth(Some("admin"), Some("t0k"));
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("admin:pw")
        );
        assert_eq!(a.check(Some(basic.as_bytes())), Ok(()));
        assert_eq!(a.check(Some(b"Bearer t0k")), Ok(()));
        assert_eq!(a.check(Some(b"Bearer t0")), Err(Denied::Wrong));
        assert_eq!(a.check(Some(b"Basic !!!")), Err(Denied::Wrong));
        assert_eq!(a.check(None), Err(Denied::Missing));
        assert_eq!(
            auth(None, None).check(Some(b"Bearer x")),
            Err(Denied::NotConfigured)
        );
    }
}
