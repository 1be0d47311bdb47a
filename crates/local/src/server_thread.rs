//! One server on a runtime and a thread of its own, so it outlives any
//! test's runtime and can be stopped (every connection with it) and started
//! again on the same port.

use crate::LocalError;
use std::future::Future;
use std::net::SocketAddr;
use tokio::net::TcpListener;

/// A server running on its own thread; dropping it stops it.
#[derive(Debug)]
pub(crate) struct ServerThread {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerThread {
    /// Binds `127.0.0.1:port` (0: a free port) on a new thread and runtime,
    /// then runs `serve(listener)` there until stopped. `setup` runs on that
    /// thread first (e.g. opens the storage); its error fails the start.
    pub(crate) fn start<S, F, Fut>(name: &str, port: u16, setup: S) -> Result<Self, LocalError>
    where
        S: FnOnce() -> Result<F, LocalError> + Send + 'static,
        F: FnOnce(TcpListener) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread_name = format!("shardkeeper-local-{name}");
        let thread = std::thread::Builder::new()
            .name(thread_name.clone())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name(thread_name)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(LocalError::Start(e.to_string())));
                        return;
                    }
                };
                let serve = match setup() {
                    Ok(serve) => serve,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match bind(port).await {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    match listener.local_addr() {
                        Ok(addr) => {
                            let _ = ready_tx.send(Ok(addr));
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(LocalError::Start(e.to_string())));
                            return;
                        }
                    }
                    let server = tokio::spawn(serve(listener));
                    let _ = stop_rx.await;
                    server.abort();
                });
                // Dropping the runtime here ends every connection task.
            })
            .map_err(|e| LocalError::Start(e.to_string()))?;
        let addr = ready_rx
            .recv()
            .map_err(|_| LocalError::Start("server thread ended before it was ready".into()))??;
        Ok(ServerThread {
            addr,
            shutdown: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Where the server listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server and its connections; waits for its thread to end.
    pub(crate) fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn bind(port: u16) -> Result<TcpListener, LocalError> {
    TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| LocalError::Start(format!("cannot listen on 127.0.0.1:{port}: {e}")))
}
