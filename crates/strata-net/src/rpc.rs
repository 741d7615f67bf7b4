//! **The control RPC** (Mercury's RPC layer): tonic/gRPC over any
//! [`Transport`], every connection authenticated first ([`crate::auth`]).
//! [`serve`] runs a service on a listener; [`connect`] opens a client
//! channel to a peer whose every call carries the deadline given.
//!
//! Bounds: control messages are at most [`MESSAGE_BYTES_MAX`]; a server
//! runs at most [`CONCURRENT_CALLS_MAX`] calls per connection and ends any
//! call at its deadline.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::auth::{self, Secret};
use crate::pb;
use crate::transport::{with_deadline, Conn, Listener, Transport};

/// Largest message: a forwarded request with its data
/// (`strata_proto::control::FORWARD_DATA_BYTES_MAX`) and its names.
pub const MESSAGE_BYTES_MAX: usize = 10 << 20;
/// Calls in flight per connection on a server.
pub const CONCURRENT_CALLS_MAX: usize = 64;
/// Authenticated connections waiting to be served.
const ACCEPTED_QUEUE_MAX: usize = 64;

/// An authenticated connection, as tonic's server wants it.
pub struct AuthedConn(Conn);

impl AsyncRead for AuthedConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for AuthedConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, data)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for AuthedConn {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

/// Serves `service` on `listener` until `shutdown` resolves. Connections
/// that fail the handshake are dropped and logged (with the peer address).
pub async fn serve<S>(
    mut listener: Box<dyn Listener>,
    secret: Secret,
    handshake_deadline: Duration,
    call_deadline: Duration,
    service: S,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error>
where
    S: pb::cluster_server::Cluster,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<AuthedConn>>(ACCEPTED_QUEUE_MAX);
    let secret = Arc::new(secret);
    let accept = tokio::spawn(async move {
        // Bounded by the listener's life: ends when the server is gone.
        loop {
            let (mut conn, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("cluster service: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if tx.is_closed() {
                return;
            }
            let (tx, secret) = (tx.clone(), secret.clone());
            tokio::spawn(async move {
                match auth::server(&mut conn, &secret, handshake_deadline).await {
                    Ok(()) => {
                        let _ = tx.send(Ok(AuthedConn(conn))).await;
                    }
                    Err(e) => tracing::warn!(peer, "cluster connection refused: {e}"),
                }
            });
        }
    });
    let incoming = tokio_stream::wrappers::ReceiverStream::new(rx);
    let svc = pb::cluster_server::ClusterServer::new(service)
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    // The server's own cap is the longest deadline any caller may give
    // (a holder writing its pages to a slow destination); each call's
    // handler ends at its caller's deadline (`grpc-timeout`, see `Client`)
    // when that is sooner.
    let res = tonic::transport::Server::builder()
        .timeout(call_deadline.max(LONG_CALL_DEADLINE))
        .concurrency_limit_per_connection(CONCURRENT_CALLS_MAX)
        .add_service(svc)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await;
    accept.abort();
    res
}

/// A client of the cluster service on `peer`; each of its calls carries its
/// deadline to the server (`grpc-timeout`), which ends the call's handler
/// there too, so a caller that gave up leaves no work behind.
pub type Client = pb::cluster_client::ClusterClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, CallDeadline>,
>;

/// Puts a call's deadline on each request (see [`Client`]).
#[derive(Clone, Copy, Debug)]
pub struct CallDeadline(Duration);

impl tonic::service::Interceptor for CallDeadline {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.set_timeout(self.0);
        Ok(req)
    }
}

/// The longest deadline of a call (a holder writing up to
/// `PUSH_PAGES_MAX` pages to a slow destination and syncing them): what a
/// server allows any call at most.
pub const LONG_CALL_DEADLINE: Duration = Duration::from_secs(120);

/// Connects to `peer` through `transport`, proves the secret, and returns a
/// client whose every call ends at `deadline`.
pub async fn connect(
    transport: Arc<dyn Transport>,
    peer: &str,
    secret: &Secret,
    deadline: Duration,
) -> io::Result<Client> {
    connect_for(transport, peer, secret, deadline, deadline).await
}

/// [`connect`] within `deadline`, for calls that end at `call_deadline`
/// (≤ [`LONG_CALL_DEADLINE`], which the server enforces).
pub async fn connect_for(
    transport: Arc<dyn Transport>,
    peer: &str,
    secret: &Secret,
    deadline: Duration,
    call_deadline: Duration,
) -> io::Result<Client> {
    assert!(
        call_deadline <= LONG_CALL_DEADLINE.max(deadline),
        "a call deadline beyond what servers allow"
    );
    let uri = format!("http://{peer}");
    let endpoint = tonic::transport::Endpoint::from_shared(uri)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{peer}: {e}")))?
        .connect_timeout(deadline)
        .timeout(call_deadline);
    let (peer_s, secret) = (peer.to_string(), secret.clone());
    let connector = tower::service_fn(move |_: tonic::codegen::http::Uri| {
        let (t, peer, secret) = (transport.clone(), peer_s.clone(), secret.clone());
        async move {
            let mut c = t.connect(&peer).await?;
            auth::client(&mut c, &secret, deadline).await?;
            Ok::<_, io::Error>(hyper_util::rt::TokioIo::new(c))
        }
    });
    let channel = with_deadline(deadline, &format!("connect to {peer}"), async {
        endpoint
            .connect_with_connector(connector)
            .await
            .map_err(|e| io::Error::other(error_chain(&e).replace("transport error: ", "")))
    })
    .await?;
    Ok(
        pb::cluster_client::ClusterClient::with_interceptor(channel, CallDeadline(call_deadline))
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX),
    )
}

/// An error and its causes on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    // Bounded: error chains are short; cap anyway.
    for _ in 0..8 {
        let Some(c) = cur else { break };
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::TcpTransport;

    struct Echo;
    /// Echo's `shadow_push` handlers that began, and that ran to their end.
    static PUSHES_BEGUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    static PUSHES_ENDED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    #[tonic::async_trait]
    impl pb::cluster_server::Cluster for Echo {
        async fn hello(
            &self,
            r: tonic::Request<pb::HelloRequest>,
        ) -> Result<tonic::Response<pb::HelloReply>, tonic::Status> {
            let r = r.into_inner();
            Ok(tonic::Response::new(pb::HelloReply {
                node: r.from_node + 1,
                name: format!("echo of {}", r.from_name),
                membership_digest: r.membership_digest,
                boot_id: 7,
                peers_up: 1,
                peers_total: 1,
            }))
        }
        async fn status(
            &self,
            _: tonic::Request<pb::StatusRequest>,
        ) -> Result<tonic::Response<pb::NodeStatus>, tonic::Status> {
            // Slower than the client's deadline.
            tokio::time::sleep(Duration::from_secs(30)).await;
            Err(tonic::Status::internal("unreachable"))
        }
        async fn drain(
            &self,
            _: tonic::Request<pb::DrainRequest>,
        ) -> Result<tonic::Response<pb::DrainReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn stop(
            &self,
            _: tonic::Request<pb::StopRequest>,
        ) -> Result<tonic::Response<pb::StopReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn flush(
            &self,
            _: tonic::Request<pb::FlushRequest>,
        ) -> Result<tonic::Response<pb::FlushState>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn client_gone(
            &self,
            _: tonic::Request<pb::ClientGoneRequest>,
        ) -> Result<tonic::Response<pb::ClientGoneReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn drain_status(
            &self,
            _: tonic::Request<pb::DrainStatusRequest>,
        ) -> Result<tonic::Response<pb::DrainStatusReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn stage(
            &self,
            _: tonic::Request<pb::StageRequest>,
        ) -> Result<tonic::Response<pb::StageReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn shadows_gone(
            &self,
            _: tonic::Request<pb::ShadowsGoneRequest>,
        ) -> Result<tonic::Response<pb::ShadowsGoneReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn shadow_push(
            &self,
            _: tonic::Request<pb::ShadowPushRequest>,
        ) -> Result<tonic::Response<pb::ShadowPushReply>, tonic::Status> {
            // a long call: longer than the servers' call deadline below
            PUSHES_BEGUN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(600)).await;
            PUSHES_ENDED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(tonic::Response::new(pb::ShadowPushReply { bytes: 7 }))
        }
        async fn shadow_sync(
            &self,
            _: tonic::Request<pb::ShadowSyncRequest>,
        ) -> Result<tonic::Response<pb::ShadowSyncReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn shadows_pending(
            &self,
            _: tonic::Request<pb::ShadowsPendingRequest>,
        ) -> Result<tonic::Response<pb::ShadowsPendingReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn shadows_unknown(
            &self,
            _: tonic::Request<pb::ShadowsUnknownRequest>,
        ) -> Result<tonic::Response<pb::ShadowsUnknownReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
    }

    #[tokio::test]
    async fn calls_work_with_the_secret_fail_without_and_end_at_the_deadline() {
        let t: Arc<dyn Transport> = Arc::new(TcpTransport);
        let l = t.listen("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let k = Secret::generate();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            l,
            k.clone(),
            Duration::from_secs(2),
            Duration::from_secs(60),
            Echo,
            async {
                let _ = stop_rx.await;
            },
        ));
        let mut c = connect(t.clone(), &addr, &k, Duration::from_millis(300))
            .await
            .unwrap();
        let r = c
            .hello(pb::HelloRequest {
                from_node: 2,
                from_name: "b".into(),
                membership_digest: vec![1, 2, 3],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (r.node, r.name.as_str(), r.membership_digest),
            (3, "echo of b", vec![1, 2, 3])
        );
        // The deadline ends a call the server does not answer.
        let e = c.status(pb::StatusRequest {}).await.unwrap_err();
        assert!(
            matches!(
                e.code(),
                tonic::Code::Cancelled | tonic::Code::DeadlineExceeded | tonic::Code::Unavailable
            ),
            "{e:?}"
        );
        // Another secret: refused.
        let e = connect(
            t.clone(),
            &addr,
            &Secret::generate(),
            Duration::from_millis(300),
        )
        .await
        .expect_err("refused");
        assert!(e.to_string().contains("secret"), "{e}");
        stop_tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    }

    /// A call given a longer deadline than the cluster's call deadline (a
    /// holder's push of pages to a slow destination) runs to its end: the
    /// server does not cut it at its own call deadline; a client with the
    /// short deadline gives up.
    #[tokio::test]
    async fn a_long_call_outlives_the_short_call_deadline() {
        let t: Arc<dyn Transport> = Arc::new(TcpTransport);
        let l = t.listen("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let k = Secret::generate();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let short = Duration::from_millis(200);
        let server = tokio::spawn(serve(
            l,
            k.clone(),
            Duration::from_secs(2),
            short,
            Echo,
            async {
                let _ = stop_rx.await;
            },
        ));
        let push = pb::ShadowPushRequest::default();
        let mut c = connect_for(
            t.clone(),
            &addr,
            &k,
            Duration::from_secs(2),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        let r = c.shadow_push(push.clone()).await.unwrap().into_inner();
        assert_eq!(r.bytes, 7);
        assert_eq!(PUSHES_ENDED.load(std::sync::atomic::Ordering::SeqCst), 1);
        // A short-deadline call gives up, and its handler on the server
        // ends with it, though the server allows calls longer: even when
        // the caller's link is cut once the call began (so no reset of the
        // call reaches the server), since the deadline travels with it.
        let ft = Arc::new(crate::faults::FaultyTransport::new(
            t.clone(),
            crate::faults::FaultPlan::none(1),
        ));
        let mut c = connect(ft.clone(), &addr, &k, short).await.unwrap();
        let call = tokio::spawn(async move { c.shadow_push(push).await });
        // Bounded: the call reaches the handler within its deadline or fails.
        for _ in 0..1000 {
            if PUSHES_BEGUN.load(std::sync::atomic::Ordering::SeqCst) == 2 || call.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        ft.partition("127.0.0.1");
        let e = call.await.unwrap().unwrap_err();
        assert!(
            matches!(
                e.code(),
                tonic::Code::Cancelled | tonic::Code::DeadlineExceeded | tonic::Code::Unavailable
            ),
            "{e:?}"
        );
        // Past the handler's own end (600 ms after it began): it never got there.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(PUSHES_BEGUN.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(
            PUSHES_ENDED.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "the abandoned call's handler ran on at the server"
        );
        ft.heal("127.0.0.1");
        stop_tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
