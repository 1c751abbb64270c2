//! Coalescing: while calls are in flight to Redis (to their slot, on a Cluster), the calls
//! that arrive for the same place wait, and go together when one returns, in one `FCALL` of
//! mode `batch` that runs each in order on one reading of `TIME` and answers each.
//!
//! A call that finds fewer than `batch_in_flight` calls in flight (one, by default) is sent
//! at once, as it is: no wait at low load. A batch holds at most `batch_calls` calls and
//! `batch_bytes` bytes of arguments (see [`RedisConfig`](super::RedisConfig)); the rest wait
//! for the next. A batch whose reply is lost (its connection dropped, its
//! wait ran out) is never sent again, as no call is: whether it ran is unknown, so each of
//! its calls fails and each rule's failure policy answers.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::{Arg, Value};
use tokio::sync::oneshot;

use super::connection::Connection;
use super::{RedisError, RedisStore};
use crate::slot;

/// The queues of calls waiting for a call in flight, by slot (one, slot 0, on a server).
pub(super) struct Batching {
    /// Calls (or batches) in flight to one place before the next ones wait.
    in_flight: usize,
    calls: usize,
    bytes: usize,
    /// The longest a batch waits on its reply: as long as any of its callers may wait.
    wait: Duration,
    /// On a Cluster a batch's keys share a slot (the script's keys must).
    by_slot: bool,
    function: &'static str,
    queues: Mutex<HashMap<u16, Queue>>,
}

#[derive(Default)]
struct Queue {
    /// Calls and batches in flight.
    in_flight: usize,
    waiting: VecDeque<Waiting>,
}

/// A call waiting for the next batch: its own `FCALL`, and where its reply goes.
struct Waiting {
    fcall: redis::Cmd,
    bytes: usize,
    answer: oneshot::Sender<Result<Value, RedisError>>,
}

impl Batching {
    /// Batches of at most `calls` calls and `bytes` bytes of arguments, sent while fewer than
    /// `in_flight` calls are; `None` (each call its own `FCALL`) when `calls` is below two.
    pub(super) fn new(
        in_flight: usize,
        calls: usize,
        bytes: usize,
        wait: Duration,
        by_slot: bool,
        function: &'static str,
    ) -> Option<Arc<Self>> {
        (calls >= 2).then(|| {
            Arc::new(Self {
                in_flight: in_flight.max(1),
                calls,
                bytes,
                wait,
                by_slot,
                function,
                queues: Mutex::new(HashMap::new()),
            })
        })
    }

    fn queues(&self) -> MutexGuard<'_, HashMap<u16, Queue>> {
        // Nothing panics while the lock is held; a poisoned map is still a consistent one.
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue of `fcall`: its first key's slot on a Cluster.
    fn slot_of(&self, fcall: &redis::Cmd) -> u16 {
        if !self.by_slot {
            return 0;
        }
        match fcall.args_iter().nth(3) {
            Some(Arg::Simple(key)) => slot::slot(key),
            _ => 0,
        }
    }

    /// The next batch of `queue`, skipping the calls whose callers gave up (never sent, so
    /// never charged).
    fn next(&self, queue: &mut Queue) -> Vec<Waiting> {
        let mut batch: Vec<Waiting> = Vec::new();
        let mut bytes = 0;
        while let Some(first) = queue.waiting.front() {
            if first.answer.is_closed() {
                queue.waiting.pop_front();
                continue;
            }
            if !batch.is_empty() && (batch.len() >= self.calls || bytes + first.bytes > self.bytes)
            {
                break;
            }
            bytes += first.bytes;
            batch.extend(queue.waiting.pop_front());
        }
        batch
    }

    /// After a call or a batch in flight on `slot` returned (or its caller gave up on it):
    /// the calls waiting go, batch after batch, each on a task of its own, while fewer than
    /// `in_flight` are in flight.
    /// `connection` is asked for only when a batch goes (the common return, with nothing
    /// waiting, costs a lock and a look-up).
    fn hand_on(self: &Arc<Self>, slot: u16, connection: impl FnOnce() -> Option<Connection>) {
        let mut queues = self.queues();
        let Some(queue) = queues.get_mut(&slot) else {
            return;
        };
        queue.in_flight = queue.in_flight.saturating_sub(1);
        if queue.waiting.is_empty() {
            if queue.in_flight == 0 && self.by_slot {
                queues.remove(&slot);
            }
            return;
        }
        let runtime = tokio::runtime::Handle::try_current();
        let (Some(connection), Ok(runtime)) = (connection(), runtime) else {
            // No runtime to send them on: each waiting call fails (its answer dropped).
            queue.waiting.clear();
            return;
        };
        let mut batches = Vec::new();
        while queue.in_flight < self.in_flight {
            let batch = self.next(queue);
            if batch.is_empty() {
                break;
            }
            queue.in_flight += 1;
            batches.push(batch);
        }
        if queue.in_flight == 0 && self.by_slot {
            queues.remove(&slot);
        }
        drop(queues);
        for batch in batches {
            let batching = Arc::clone(self);
            let connection = connection.clone();
            runtime.spawn(async move {
                let mut sent = connection.clone();
                // Handed on however this task ends.
                let _turn = BatchTurn {
                    batching: Arc::clone(&batching),
                    slot,
                    connection: Some(connection),
                };
                let reply = tokio::time::timeout(batching.wait, batching.send(&mut sent, &batch))
                    .await
                    .unwrap_or(Err(RedisError::Timeout(batching.wait)));
                answer(batch, reply);
            });
        }
    }

    /// One `FCALL` for `batch` (a call alone as it is): each call's reply, in order.
    async fn send(
        &self,
        connection: &mut Connection,
        batch: &[Waiting],
    ) -> Result<Vec<Value>, RedisError> {
        let single;
        let fcall = match batch {
            [one] => &one.fcall,
            _ => {
                single = self.command(batch)?;
                &single
            }
        };
        let reply: Value = match RedisStore::query(connection, fcall).await {
            // The server lacks the library (restarted, flushed, failed over): nothing ran.
            Err(RedisError::Redis(e)) if RedisStore::function_missing(&e) => {
                RedisStore::load(connection).await?;
                RedisStore::query(connection, fcall).await?
            }
            reply => reply?,
        };
        match (batch, reply) {
            ([_], reply) => Ok(vec![reply]),
            (_, Value::Array(replies)) if replies.len() == batch.len() => Ok(replies),
            (_, reply) => Err(RedisError::Protocol(format!(
                "a batch of {} calls answered {reply:?}",
                batch.len()
            ))),
        }
    }

    /// `FCALL <function> <keys> <every call's keys> batch <shape> <every call's arguments>`.
    fn command(&self, batch: &[Waiting]) -> Result<redis::Cmd, RedisError> {
        let mut calls = Vec::with_capacity(batch.len());
        let mut shape = String::with_capacity(batch.len() * 4);
        let mut digits = itoa::Buffer::new();
        let (mut keys, mut data) = (0, 64);
        for waiting in batch {
            let call = Call::of(&waiting.fcall)?;
            if !shape.is_empty() {
                shape.push(' ');
            }
            shape.push_str(digits.format(call.keys.len()));
            shape.push(' ');
            shape.push_str(digits.format(call.args.len()));
            keys += call.keys.len();
            data += waiting.bytes;
            calls.push(call);
        }
        let args = calls
            .iter()
            .map(|c| c.keys.len() + c.args.len())
            .sum::<usize>();
        let mut fcall = redis::Cmd::with_capacity(5 + args, data + shape.len());
        fcall.arg("FCALL").arg(self.function).arg(keys);
        for call in &calls {
            for key in &call.keys {
                fcall.arg(*key);
            }
        }
        fcall.arg("batch").arg(shape.as_str());
        for call in &calls {
            for arg in &call.args {
                fcall.arg(*arg);
            }
        }
        Ok(fcall)
    }
}

/// The keys and the arguments of one `FCALL <function> <numkeys> <keys...> <args...>`.
struct Call<'a> {
    keys: Vec<&'a [u8]>,
    args: Vec<&'a [u8]>,
}

impl<'a> Call<'a> {
    fn of(fcall: &'a redis::Cmd) -> Result<Self, RedisError> {
        let mut parts = fcall.args_iter().skip(2).map(|arg| match arg {
            Arg::Simple(bytes) => bytes,
            _ => &[],
        });
        let keys = parts
            .next()
            .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
            .ok_or_else(|| RedisError::Protocol("a batched call is not an FCALL".to_owned()))?;
        let keys: Vec<&[u8]> = parts.by_ref().take(keys).collect();
        Ok(Self {
            keys,
            args: parts.collect(),
        })
    }
}

/// Each call of `batch` its reply, or the batch's error.
fn answer(batch: Vec<Waiting>, reply: Result<Vec<Value>, RedisError>) {
    match reply {
        Ok(replies) => {
            for (waiting, reply) in batch.into_iter().zip(replies) {
                // A caller that gave up meanwhile is gone: nothing to tell it.
                let _ = waiting.answer.send(Ok(reply));
            }
        }
        Err(e) => {
            for waiting in batch {
                let _ = waiting.answer.send(Err(e.clone()));
            }
        }
    }
}

/// The size of a call's arguments, as a batch counts its bytes.
fn size(fcall: &redis::Cmd) -> usize {
    fcall
        .args_iter()
        .map(|arg| match arg {
            Arg::Simple(bytes) => bytes.len(),
            _ => 0,
        })
        .sum()
}

/// A batch in flight, on its own task: when it is answered (or the task ends), the calls
/// waiting go on.
struct BatchTurn {
    batching: Arc<Batching>,
    slot: u16,
    connection: Option<Connection>,
}

impl Drop for BatchTurn {
    fn drop(&mut self) {
        let connection = self.connection.take();
        self.batching.hand_on(self.slot, || connection);
    }
}

/// The call in flight, sent by its own caller: when it returns, or when its caller gives up
/// on it, the calls that waited for it go on.
struct Turn<'a> {
    store: &'a RedisStore,
    batching: &'a Arc<Batching>,
    slot: u16,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let store = self.store;
        self.batching
            .hand_on(self.slot, || store.connection.get().cloned());
    }
}

impl RedisStore {
    /// Sends `fcall` at once when nothing is in flight to its place, else with the next
    /// batch (see the module's documentation).
    pub(super) async fn coalesced<T: redis::FromRedisValue>(
        &self,
        connection: &mut Connection,
        fcall: &redis::Cmd,
    ) -> Result<T, RedisError> {
        let Some(batching) = &self.batching else {
            return Self::query(connection, fcall).await;
        };
        let slot = batching.slot_of(fcall);
        let answered = {
            let mut queues = batching.queues();
            let queue = queues.entry(slot).or_default();
            if queue.in_flight >= batching.in_flight {
                let (answer, answered) = oneshot::channel();
                queue.waiting.push_back(Waiting {
                    fcall: fcall.clone(),
                    bytes: size(fcall),
                    answer,
                });
                Some(answered)
            } else {
                queue.in_flight += 1;
                None
            }
        };
        let Some(answered) = answered else {
            let _turn = Turn {
                store: self,
                batching,
                slot,
            };
            return Self::query(connection, fcall).await;
        };
        let reply = answered.await.map_err(|_| {
            RedisError::Protocol("the batch holding this call was dropped unanswered".to_owned())
        })??;
        match reply {
            // A call of the batch that failed: the script's error, as its status (no call
            // answers a status otherwise).
            Value::SimpleString(error) => Err(RedisError::Redis(redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "the script failed",
                error,
            )))),
            reply => Ok(redis::from_redis_value(reply).map_err(redis::RedisError::from)?),
        }
    }
}
