//! **The cluster secret and the handshake** every connection between
//! daemons starts with, before any RPC or bulk byte.
//!
//! Both sides prove they know the secret without sending it
//! (HMAC-SHA256 over fresh nonces, a different label per direction so one
//! side's proof cannot be reflected back):
//!
//! ```text
//! C → S  MAGIC | nonce_c                              (8 + 32 bytes)
//! S → C  MAGIC | nonce_s | HMAC(k, "server" nonce_c nonce_s)   (8 + 32 + 32)
//! C → S  HMAC(k, "client" nonce_s nonce_c)            (32)
//! S → C  "OK"                                          (2)
//! ```
//!
//! A side that fails to prove it gets the connection closed (and the server
//! logs the refusal with the peer's address). Every step has the caller's
//! deadline; sizes are fixed, so hostile input cannot make a side allocate
//! or wait beyond them.

use std::io;
use std::path::Path;
use std::time::Duration;

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::transport::{with_deadline, Conn};

/// Protocol name and version.
pub const MAGIC: &[u8; 8] = b"STRATA\x01\x00";
/// Bytes of a secret, of a nonce and of a proof.
pub const SECRET_BYTES: usize = 32;
const NONCE_BYTES: usize = 32;
const MAC_BYTES: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// The cluster secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; SECRET_BYTES]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read the cluster secret {path}: {error} (strata cluster start writes one; or set cluster.secret_file)")]
    Read { path: String, error: io::Error },
    #[error("the cluster secret {path} is readable by others (mode {mode:o}): chmod 600 it")]
    Mode { path: String, mode: u32 },
    #[error("the cluster secret {path} is not {SECRET_BYTES} bytes of hex")]
    Format { path: String },
    #[error("cannot write the cluster secret {path}: {error}")]
    Write { path: String, error: io::Error },
}

/// The permission bits of a file that must be its owner's alone (a secret,
/// a TLS key) when its group or others have any of them; None when it is
/// private (0600 or stricter).
pub(crate) fn others_may_access(path: &Path) -> io::Result<Option<u32>> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
    Ok((mode & 0o077 != 0).then_some(mode))
}

impl Secret {
    /// A new random secret.
    pub fn generate() -> Secret {
        let mut k = [0u8; SECRET_BYTES];
        rand::rng().fill_bytes(&mut k);
        Secret(k)
    }

    pub fn from_bytes(k: [u8; SECRET_BYTES]) -> Secret {
        Secret(k)
    }

    /// Reads a secret file: hex, mode 0600 (or stricter).
    pub fn load(path: &Path) -> Result<Secret, SecretError> {
        let p = path.display().to_string();
        match others_may_access(path) {
            Err(error) => return Err(SecretError::Read { path: p, error }),
            Ok(Some(mode)) => return Err(SecretError::Mode { path: p, mode }),
            Ok(None) => {}
        }
        let text = std::fs::read_to_string(path).map_err(|error| SecretError::Read {
            path: p.clone(),
            error,
        })?;
        let t = text.trim();
        if t.len() != SECRET_BYTES * 2 {
            return Err(SecretError::Format { path: p });
        }
        let mut k = [0u8; SECRET_BYTES];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(&t[2 * i..2 * i + 2], 16)
                .map_err(|_| SecretError::Format { path: p.clone() })?;
        }
        Ok(Secret(k))
    }

    /// Writes the secret to a new file, mode 0600 (never over an existing one).
    pub fn save(&self, path: &Path) -> Result<(), SecretError> {
        let hex: String = self.0.iter().map(|b| format!("{b:02x}")).collect();
        write_new(path, format!("{hex}\n").as_bytes(), 0o600).map_err(|error| SecretError::Write {
            path: path.display().to_string(),
            error,
        })
    }

    fn mac(&self, label: &[u8], a: &[u8], b: &[u8]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        m.update(label);
        m.update(a);
        m.update(b);
        m
    }
}

/// Writes `bytes` to a new file at `path` with `mode` (its directory made
/// first; never over an existing file), synced.
pub(crate) fn write_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why.to_string())
}

// The handshake's messages, shared by the async halves (the RPC) and the
// blocking ones (the bulk path's dial and accept).

fn client_hello() -> ([u8; NONCE_BYTES], Vec<u8>) {
    let mut nonce_c = [0u8; NONCE_BYTES];
    rand::rng().fill_bytes(&mut nonce_c);
    let mut hello = Vec::with_capacity(MAGIC.len() + NONCE_BYTES);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&nonce_c);
    (nonce_c, hello)
}

const ANSWER_BYTES: usize = 8 + NONCE_BYTES + MAC_BYTES;
const HELLO_BYTES: usize = 8 + NONCE_BYTES;

/// Checks the server's answer; the client's proof to send.
fn client_proof(
    secret: &Secret,
    nonce_c: &[u8; NONCE_BYTES],
    answer: &[u8; ANSWER_BYTES],
) -> io::Result<[u8; MAC_BYTES]> {
    if &answer[..8] != MAGIC {
        return Err(refused(
            "the peer is not a strata daemon of this protocol version",
        ));
    }
    let nonce_s = &answer[8..8 + NONCE_BYTES];
    secret
        .mac(b"server", nonce_c, nonce_s)
        .verify_slice(&answer[8 + NONCE_BYTES..])
        .map_err(|_| refused("the peer does not know the cluster secret"))?;
    Ok(secret
        .mac(b"client", nonce_s, nonce_c)
        .finalize()
        .into_bytes()
        .into())
}

fn eof_refused(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        refused("the peer closed the connection during the handshake (not a strata daemon of this version?)")
    } else {
        e
    }
}

fn ok_refused(ok: io::Result<[u8; 2]>) -> io::Result<()> {
    match ok {
        Ok(b) if &b == b"OK" => Ok(()),
        Ok(_) => Err(refused("the peer refused the handshake")),
        Err(_) => Err(refused(
            "the peer refused our proof of the cluster secret (a different secret file?)",
        )),
    }
}

/// The server's answer to a hello, and its nonce.
fn server_answer(
    secret: &Secret,
    hello: &[u8; HELLO_BYTES],
) -> io::Result<([u8; NONCE_BYTES], Vec<u8>)> {
    if &hello[..8] != MAGIC {
        return Err(refused("not a strata daemon of this protocol version"));
    }
    let nonce_c = &hello[8..];
    let mut nonce_s = [0u8; NONCE_BYTES];
    rand::rng().fill_bytes(&mut nonce_s);
    let mut answer = Vec::with_capacity(ANSWER_BYTES);
    answer.extend_from_slice(MAGIC);
    answer.extend_from_slice(&nonce_s);
    answer.extend_from_slice(
        &secret
            .mac(b"server", nonce_c, &nonce_s)
            .finalize()
            .into_bytes(),
    );
    Ok((nonce_s, answer))
}

fn server_check(
    secret: &Secret,
    hello: &[u8; HELLO_BYTES],
    nonce_s: &[u8; NONCE_BYTES],
    proof: &[u8; MAC_BYTES],
) -> io::Result<()> {
    secret
        .mac(b"client", nonce_s, &hello[8..])
        .verify_slice(proof)
        .map_err(|_| refused("the peer does not know the cluster secret"))
}

/// The connecting side's half; `Ok` once both sides proved the secret.
pub async fn client(conn: &mut Conn, secret: &Secret, deadline: Duration) -> io::Result<()> {
    with_deadline(deadline, "cluster handshake", async {
        let (nonce_c, hello) = client_hello();
        conn.write_all(&hello).await?;
        let mut answer = [0u8; ANSWER_BYTES];
        conn.read_exact(&mut answer).await.map_err(eof_refused)?;
        let proof = client_proof(secret, &nonce_c, &answer)?;
        conn.write_all(&proof).await?;
        let mut ok = [0u8; 2];
        ok_refused(conn.read_exact(&mut ok).await.map(|_| ok))
    })
    .await
}

/// The accepting side's half; `Err` (and the caller drops the connection)
/// when the peer does not prove the secret.
pub async fn server(conn: &mut Conn, secret: &Secret, deadline: Duration) -> io::Result<()> {
    with_deadline(deadline, "cluster handshake", async {
        let mut hello = [0u8; HELLO_BYTES];
        conn.read_exact(&mut hello).await?;
        let (nonce_s, answer) = server_answer(secret, &hello)?;
        conn.write_all(&answer).await?;
        let mut proof = [0u8; MAC_BYTES];
        conn.read_exact(&mut proof).await?;
        server_check(secret, &hello, &nonce_s, &proof)?;
        conn.write_all(b"OK").await?;
        Ok(())
    })
    .await
}

/// [`client`] on a blocking stream; the caller's socket timeouts are the
/// deadline.
pub fn client_blocking<S: std::io::Read + std::io::Write>(
    conn: &mut S,
    secret: &Secret,
) -> io::Result<()> {
    let (nonce_c, hello) = client_hello();
    conn.write_all(&hello)?;
    let mut answer = [0u8; ANSWER_BYTES];
    conn.read_exact(&mut answer).map_err(eof_refused)?;
    let proof = client_proof(secret, &nonce_c, &answer)?;
    conn.write_all(&proof)?;
    let mut ok = [0u8; 2];
    ok_refused(conn.read_exact(&mut ok).map(|_| ok))
}

/// [`server`] on a blocking stream; the caller's socket timeouts are the
/// deadline.
pub fn server_blocking<S: std::io::Read + std::io::Write>(
    conn: &mut S,
    secret: &Secret,
) -> io::Result<()> {
    let mut hello = [0u8; HELLO_BYTES];
    conn.read_exact(&mut hello)?;
    let (nonce_s, answer) = server_answer(secret, &hello)?;
    conn.write_all(&answer)?;
    let mut proof = [0u8; MAC_BYTES];
    conn.read_exact(&mut proof)?;
    server_check(secret, &hello, &nonce_s, &proof)?;
    conn.write_all(b"OK")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{TcpTransport, Transport};

    async fn pair(a: Secret, b: Secret) -> (io::Result<()>, io::Result<()>) {
        let t = TcpTransport;
        let mut l = t.listen("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let s = tokio::spawn(async move {
            let (mut c, _) = l.accept().await.unwrap();
            server(&mut c, &b, Duration::from_secs(5)).await
        });
        let mut c = t.connect(&addr).await.unwrap();
        let rc = client(&mut c, &a, Duration::from_secs(5)).await;
        drop(c);
        (rc, s.await.unwrap())
    }

    #[tokio::test]
    async fn same_secret_passes_another_is_refused_both_ways() {
        let k = Secret::generate();
        let (c, s) = pair(k.clone(), k.clone()).await;
        c.unwrap();
        s.unwrap();
        let (c, s) = pair(k.clone(), Secret::generate()).await;
        assert_eq!(c.unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        assert!(s.is_err());
    }

    #[tokio::test]
    async fn garbage_and_silence_are_refused_within_the_deadline() {
        let t = TcpTransport;
        let mut l = t.listen("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let k = Secret::generate();
        let s = tokio::spawn(async move {
            let mut out = Vec::new();
            for _ in 0..2 {
                let (mut c, _) = l.accept().await.unwrap();
                out.push(server(&mut c, &k, Duration::from_millis(200)).await);
            }
            out
        });
        let mut c = t.connect(&addr).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n.............")
            .await
            .unwrap();
        let _silent = t.connect(&addr).await.unwrap();
        let out = s.await.unwrap();
        assert_eq!(
            out[0].as_ref().unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
        assert_eq!(out[1].as_ref().unwrap_err().kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn secret_files_are_private_and_round_trip() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/cluster.secret");
        let k = Secret::generate();
        k.save(&p).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(Secret::load(&p).unwrap(), k);
        assert!(k.save(&p).is_err(), "never overwrites a secret");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(Secret::load(&p), Err(SecretError::Mode { .. })));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&p, "zz\n").unwrap();
        assert!(matches!(Secret::load(&p), Err(SecretError::Format { .. })));
        assert!(matches!(
            Secret::load(&d.path().join("none")),
            Err(SecretError::Read { .. })
        ));
    }
}
