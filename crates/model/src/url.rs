//! The parts of an `http[s]://` URL msgbench needs (connect address, authority, TLS, the
//! default request target): read by the `http` section and by gRPC's, on the model's ground
//! floor so that neither imports the other for it.

/// Why a URL cannot be measured, and how to write it.
type UrlError = (String, &'static str);

/// A URL's parts msgbench needs.
pub(crate) struct Url {
    /// `host:port` to connect to.
    pub(crate) address: String,
    /// The `Host` header (the authority as written).
    pub(crate) authority: String,
    /// The host alone (the name a certificate carries).
    pub(crate) host: String,
    /// `https://`.
    pub(crate) tls: bool,
    /// The path and query after the authority (`/` when there is none), the fragment left out:
    /// the default request's target.
    pub(crate) target: String,
}

/// The parts of `http[s]://host[:port][/…]`.
pub(crate) fn parse_url(url: &str) -> Result<Url, UrlError> {
    const FIX: &str = "write it like \"http://127.0.0.1:8080\" or \"https://api.example.com\"";
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(("has no scheme".into(), FIX));
    };
    let tls = match scheme.to_ascii_lowercase().as_str() {
        "http" => false,
        "https" => true,
        other => return Err((format!("has the scheme `{other}`, not http or https"), FIX)),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err(("has no host (or has credentials)".into(), FIX));
    }
    let has_port = match authority.rsplit_once(':') {
        Some((_, port)) if !authority.ends_with(']') => {
            port.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| (format!("has the port `{port}`"), FIX))?;
            true
        }
        _ => false,
    };
    let address = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:{}", if tls { 443 } else { 80 })
    };
    let host = if has_port {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    } else {
        authority
    };
    let after = rest[authority.len()..]
        .split('#')
        .next()
        .unwrap_or_default();
    let target = match after.chars().next() {
        None => "/".to_string(),
        Some('?') => format!("/{after}"),
        Some(_) => after.to_string(),
    };
    Ok(Url {
        address,
        authority: authority.to_string(),
        host: host.to_string(),
        tls,
        target,
    })
}
