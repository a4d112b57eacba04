//! Connecting to the server: plain or TLS channels (the certificate flags of `bgd`), and the
//! bearer token every request carries when `--auth-token` is given.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// TLS material for one endpoint, as `bgd`'s `--server-cert`, `--client-key`, `--client-cert`.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    pub server_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
}

/// The bearer token attached to each request (`authorization: Bearer TOKEN`).
#[derive(Clone, Default)]
pub struct Auth {
    header: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl Auth {
    /// Read the token file (`--auth-token FILE`); surrounding whitespace is dropped.
    pub fn from_file(path: Option<&Path>) -> Result<Auth, String> {
        let Some(path) = path else { return Ok(Auth::default()) };
        let token = std::fs::read_to_string(path)
            .map_err(|e| format!("--auth-token {}: {e}", path.display()))?;
        let value = format!("Bearer {}", token.trim());
        let header = value.parse().map_err(|_| {
            format!("--auth-token {}: the token is not a valid header value", path.display())
        })?;
        Ok(Auth { header: Some(header) })
    }

    /// A request carrying the token.
    pub fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(msg);
        if let Some(h) = &self.header {
            req.metadata_mut().insert("authorization", h.clone());
        }
        req
    }
}

fn read(path: &Path, flag: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
}

/// An endpoint for `url` (`http://host:port`, `https://...`; a bare `host:port` is http; the
/// port defaults to 50051 as bgd's), with TLS when the URL is https or certificates are given.
/// The channel connects lazily and reconnects by itself after the server restarts.
pub fn channel(url: &str, tls: &Tls) -> Result<Channel, String> {
    let mut url = url.trim().to_owned();
    if !url.contains("://") {
        url = format!("http://{url}");
    }
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", &url));
    if scheme != "http" && scheme != "https" {
        return Err(format!("--remote {url}: use http://HOST:PORT or https://HOST:PORT"));
    }
    let host_port = rest.trim_end_matches('/');
    if host_port.is_empty() || host_port.contains('/') {
        return Err(format!("--remote {url}: expected SCHEME://HOST[:PORT]"));
    }
    let has_port = host_port.rsplit_once(':').is_some_and(|(h, p)| {
        !h.is_empty() && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())
    }) && !host_port.ends_with(']');
    let full = if has_port {
        format!("{scheme}://{host_port}")
    } else {
        format!("{scheme}://{host_port}:50051")
    };
    let mut ep = Endpoint::from_shared(full.clone())
        .map_err(|e| format!("--remote {url}: {e}"))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    let use_tls = scheme == "https" || tls.server_cert.is_some() || tls.client_cert.is_some();
    if use_tls {
        let mut cfg = ClientTlsConfig::new();
        if let Some(p) = &tls.server_cert {
            cfg = cfg.ca_certificate(Certificate::from_pem(read(p, "--server-cert")?));
        }
        match (&tls.client_cert, &tls.client_key) {
            (Some(c), Some(k)) => {
                cfg = cfg.identity(Identity::from_pem(
                    read(c, "--client-cert")?,
                    read(k, "--client-key")?,
                ));
            }
            (None, None) => {}
            _ => return Err("--client-cert and --client-key go together".into()),
        }
        ep = ep.tls_config(cfg).map_err(|e| format!("TLS for {full}: {e}"))?;
    }
    Ok(ep.connect_lazy())
}
