//! One watch over the deadlines of a policy's attempts in flight, in place of a tokio timer
//! per attempt.
//!
//! A `tokio::time::timeout` per attempt makes a timer entry, puts it in the wheel under the
//! driver's lock and takes it out on drop, on every request. Here an attempt that is not
//! done on its first poll puts its deadline and waker in a slab under one short lock, and
//! takes them out when it ends; one task per runtime (spawned on the first attempt there)
//! sleeps until the earliest deadline, cuts what is past it and wakes those attempts. An
//! attempt that ends takes nothing else with it: the task's deadline may then be stale, and
//! it scans the slab and sleeps again when it wakes (with requests ending well before their
//! deadline, once per deadline, 30 s by default).
//!
//! Precision: the task sleeps on tokio's timer until the earliest deadline, so an attempt is
//! cut as `tokio::time::timeout` cuts it (the timer's 1 ms resolution) plus one wakeup of the
//! watch task before the attempt's own: on paused time, exactly at the deadline.
//!
//! Runtimes: a watch is kept per tokio runtime (by its id), as a timer belongs to its
//! runtime, so a runtime left idle or shut down never holds back another's deadlines; a
//! watch task that its runtime drops takes its watch with it, and the next attempt there
//! starts another. Outside a tokio runtime the attempt falls back to
//! `tokio::time::timeout` (which needs tokio's timer: so does reqwest). A runtime without
//! timers fails as `tokio::time::timeout` fails there: the watch's timer is made in the
//! attempt's task, before the watch task is spawned. The tasks end when the policy is
//! dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::runtime::{Handle, Id};
use tokio::time::{Instant, Sleep};

/// The attempt outlived its deadline and was cut.
#[derive(Debug)]
pub(crate) struct Cut;

/// The deadlines of one policy's attempts, one watch per runtime. The policy owns it;
/// dropping it ends the watch tasks.
#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    watches: Mutex<Vec<Watch>>,
    /// Bumped after each scan that cut an attempt: an attempt polled again reads it and
    /// takes the lock only when it moved.
    cuts: AtomicU64,
    /// Names the watches, so a registration finds its own after others come and go.
    serial: AtomicU64,
}

#[derive(Debug)]
struct Watch {
    runtime: Id,
    serial: u64,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Attempts watched (slots in use).
    watched: usize,
    /// When the task next looks: the earliest deadline as of its last scan or any later
    /// registration (`None`: nothing to watch). Attempts that end leave it as it is.
    next: Option<Instant>,
    /// The watch task, to wake when a registration brings `next` forward.
    task: Option<Waker>,
}

#[derive(Debug)]
enum Slot {
    Free,
    Watched {
        deadline: Instant,
        /// `None` once cut.
        waker: Option<Waker>,
    },
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Vec<Watch>> {
        // Slots and wakers only: a panic elsewhere cannot leave them inconsistent.
        self.watches.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn find(watches: &mut [Watch], serial: u64) -> Option<&mut Watch> {
    watches.iter_mut().find(|w| w.serial == serial)
}

impl Watchdog {
    /// Runs `attempt`, cut with [`Cut`] if it is not done `left` from now.
    ///
    /// Not an `async fn`: one binds its arguments a second time inside its future
    /// (rust-lang/rust#62958), and this one is part of every attempt's.
    #[allow(clippy::manual_async_fn)] // the argument bound twice, above
    pub(crate) fn within<'a, F: Future + 'a>(
        &'a self,
        left: Duration,
        attempt: F,
    ) -> impl Future<Output = Result<F::Output, Cut>> + 'a {
        async move {
            let (Ok(runtime), Some(deadline)) =
                (Handle::try_current(), Instant::now().checked_add(left))
            else {
                // No runtime to watch in (or a deadline past the clock's range): tokio's own.
                // Boxed: this rare path's timer would otherwise make every attempt's future
                // larger, and the middleware's future past the allocator's fast sizes.
                return Box::pin(tokio::time::timeout(left, attempt))
                    .await
                    .map_err(|_| Cut);
            };
            let mut attempt = std::pin::pin!(attempt);
            let mut entry = Entry {
                shared: &self.shared,
                runtime: runtime.id(),
                deadline,
                registered: None,
            };
            drop(runtime);
            std::future::poll_fn(|cx| {
                // The attempt first, as `timeout` does: an answer ready at the deadline wins.
                if let Poll::Ready(output) = attempt.as_mut().poll(cx) {
                    return Poll::Ready(Ok(output));
                }
                entry.poll_cut(cx).map(Err)
            })
            .await
        }
    }

    /// Attempts in flight being watched, in every runtime.
    pub(crate) fn watched(&self) -> usize {
        self.shared.lock().iter().map(|w| w.watched).sum()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // No attempt is in flight (each borrows the policy). A task finds its watch gone
        // under the lock, whether it polls before this (and is woken here) or after.
        let watches = std::mem::take(&mut *self.shared.lock());
        watches
            .into_iter()
            .filter_map(|w| w.task)
            .for_each(Waker::wake);
    }
}

/// One attempt's place in its runtime's watch, taken out when the attempt ends.
struct Entry<'a> {
    shared: &'a Arc<Shared>,
    runtime: Id,
    deadline: Instant,
    registered: Option<Registered>,
}

struct Registered {
    serial: u64,
    slot: usize,
    /// `Shared::cuts` as last seen.
    cuts: u64,
    /// The waker the slot holds (`Waker::will_wake`'s comparison), to see without the
    /// lock or a copy of it whether it changed.
    waker: (usize, usize),
}

fn identity(waker: &Waker) -> (usize, usize) {
    (
        waker.data() as usize,
        std::ptr::from_ref(waker.vtable()) as usize,
    )
}

impl Entry<'_> {
    /// Registers the attempt (first pending poll) or keeps its waker current; ready once
    /// the watch cut it.
    fn poll_cut(&mut self, cx: &mut Context<'_>) -> Poll<Cut> {
        let Some(registered) = &mut self.registered else {
            self.register(cx);
            return Poll::Pending;
        };
        let cuts = self.shared.cuts.load(Ordering::Acquire);
        let stale = registered.waker != identity(cx.waker());
        if cuts == registered.cuts && !stale {
            return Poll::Pending;
        }
        let mut watches = self.shared.lock();
        registered.cuts = cuts;
        let slot =
            find(&mut watches, registered.serial).and_then(|w| w.slots.get_mut(registered.slot));
        match slot {
            Some(Slot::Watched { waker: None, .. }) => Poll::Ready(Cut),
            Some(Slot::Watched {
                waker: Some(waker), ..
            }) => {
                if stale {
                    let old = std::mem::replace(waker, cx.waker().clone());
                    registered.waker = identity(cx.waker());
                    drop(watches);
                    drop(old);
                }
                Poll::Pending
            }
            // Its runtime's watch task was dropped (the runtime shut down): register again
            // wherever the attempt is polled now.
            Some(Slot::Free) | None => {
                drop(watches);
                self.registered = None;
                if let Ok(runtime) = Handle::try_current() {
                    self.runtime = runtime.id();
                    self.register(cx);
                }
                Poll::Pending
            }
        }
    }

    fn register(&mut self, cx: &mut Context<'_>) {
        let id = self.runtime;
        let mut watches = self.shared.lock();
        let index = match watches.iter().position(|w| w.runtime == id) {
            Some(index) => index,
            None => {
                // A timer made here, in the attempt's task: a runtime without timers fails
                // as `tokio::time::timeout` failed, not in a task nobody watches.
                let sleep = Box::pin(tokio::time::sleep_until(self.deadline));
                let serial = self.shared.serial.fetch_add(1, Ordering::Relaxed);
                watches.push(Watch {
                    runtime: id,
                    serial,
                    slots: Vec::new(),
                    free: Vec::new(),
                    watched: 0,
                    next: None,
                    task: None,
                });
                // `within` found this runtime current, and the attempt is polled in it.
                Handle::current().spawn(Task {
                    shared: Arc::downgrade(self.shared),
                    serial,
                    sleep,
                });
                watches.len() - 1
            }
        };
        let cuts = self.shared.cuts.load(Ordering::Acquire);
        let watch = &mut watches[index];
        let slot = Slot::Watched {
            deadline: self.deadline,
            waker: Some(cx.waker().clone()),
        };
        let at = match watch.free.pop() {
            Some(at) => {
                watch.slots[at] = slot;
                at
            }
            None => {
                watch.slots.push(slot);
                watch.slots.len() - 1
            }
        };
        watch.watched += 1;
        // Deadlines mostly come in order (now + the same deadline): the task is woken only
        // for one earlier than it sleeps to, or when it sleeps with nothing to watch.
        let task = match watch.next {
            Some(next) if next <= self.deadline => None,
            _ => {
                watch.next = Some(self.deadline);
                watch.task.clone()
            }
        };
        let serial = watch.serial;
        drop(watches);
        if let Some(task) = task {
            task.wake();
        }
        self.registered = Some(Registered {
            serial,
            slot: at,
            cuts,
            waker: identity(cx.waker()),
        });
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        let Some(registered) = self.registered.take() else {
            return;
        };
        let mut watches = self.shared.lock();
        let Some(watch) = find(&mut watches, registered.serial) else {
            return;
        };
        let Some(slot) = watch.slots.get_mut(registered.slot) else {
            return;
        };
        let old = std::mem::replace(slot, Slot::Free);
        if matches!(old, Slot::Watched { .. }) {
            watch.free.push(registered.slot);
            watch.watched -= 1;
        }
        drop(watches);
        // Wakers dropped outside the lock: an executor's waker may do anything on drop.
        drop(old);
    }
}

/// The task that watches one runtime's attempts.
struct Task {
    shared: Weak<Shared>,
    serial: u64,
    sleep: Pin<Box<Sleep>>,
}

impl Future for Task {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(shared) = self.shared.upgrade() else {
            return Poll::Ready(());
        };
        loop {
            let now = Instant::now();
            let mut cut = Vec::new();
            let next = {
                let mut watches = shared.lock();
                let Some(watch) = find(&mut watches, self.serial) else {
                    return Poll::Ready(());
                };
                if watch.next.is_some_and(|next| next <= now) {
                    let mut earliest: Option<Instant> = None;
                    for slot in &mut watch.slots {
                        if let Slot::Watched {
                            deadline,
                            waker: waker @ Some(_),
                        } = slot
                        {
                            if *deadline <= now {
                                cut.extend(waker.take());
                            } else {
                                earliest = Some(earliest.map_or(*deadline, |e| e.min(*deadline)));
                            }
                        }
                    }
                    watch.next = earliest;
                }
                if !watch.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                    watch.task = Some(cx.waker().clone());
                }
                watch.next
            };
            if !cut.is_empty() {
                // After the slots are marked: an attempt that sees the count move finds
                // its slot cut.
                shared.cuts.fetch_add(1, Ordering::Release);
                cut.into_iter().for_each(Waker::wake);
            }
            let Some(next) = next else {
                return Poll::Pending;
            };
            if self.sleep.deadline() != next {
                self.sleep.as_mut().reset(next);
            }
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // Dropped with its runtime: the watch goes too, and attempts still polled elsewhere
        // register again with a runtime that runs.
        if let Some(shared) = self.shared.upgrade() {
            let mut watches = shared.lock();
            let gone = watches
                .iter()
                .position(|w| w.serial == self.serial)
                .map(|at| watches.swap_remove(at));
            drop(watches);
            drop(gone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::pending;

    const SECOND: Duration = Duration::from_secs(1);

    /// A hung attempt is cut exactly at its deadline on paused time, whatever order the
    /// deadlines were registered in and whatever ended before.
    #[tokio::test(start_paused = true)]
    async fn each_hung_attempt_is_cut_at_its_own_deadline() {
        let dog = Arc::new(Watchdog::default());
        let start = Instant::now();
        let hung = |dog: Arc<Watchdog>, after: u32| {
            tokio::spawn(async move {
                let cut = dog.within(after * SECOND, pending::<()>()).await;
                (cut.is_err(), start.elapsed())
            })
        };
        // 10 s first, then 2 s (earlier than the watch sleeps to: it must wake), then one
        // that ends on its own at 1 s (it leaves the watch's next look stale), then 5 s.
        let ten = hung(dog.clone(), 10);
        tokio::task::yield_now().await;
        let two = hung(dog.clone(), 2);
        let done = {
            let dog = dog.clone();
            tokio::spawn(async move { dog.within(3 * SECOND, tokio::time::sleep(SECOND)).await })
        };
        let five = hung(dog.clone(), 5);
        assert!(done.await.unwrap().is_ok());
        assert_eq!(two.await.unwrap(), (true, 2 * SECOND));
        assert_eq!(five.await.unwrap(), (true, 5 * SECOND));
        assert_eq!(ten.await.unwrap(), (true, 10 * SECOND));
        assert_eq!(dog.watched(), 0);
    }

    /// As `tokio::time::timeout`: an attempt done at its deadline is not cut.
    #[tokio::test(start_paused = true)]
    async fn an_attempt_done_at_the_deadline_is_not_cut() {
        let dog = Watchdog::default();
        let done = dog.within(2 * SECOND, async {
            tokio::time::sleep(2 * SECOND).await;
            7
        });
        assert_eq!(done.await.unwrap(), 7);
        // Done on its first poll: never watched.
        assert_eq!(dog.within(SECOND, async { 8 }).await.unwrap(), 8);
        assert_eq!(dog.watched(), 0);
    }

    /// 10,000 attempts dropped in flight leave nothing behind, and their slots serve the
    /// next ones.
    #[tokio::test(start_paused = true)]
    async fn attempts_dropped_in_flight_leave_the_watch_empty() {
        let dog = Arc::new(Watchdog::default());
        for round in 0..2 {
            let tasks: Vec<_> = (0..10_000)
                .map(|i: u32| {
                    let dog = dog.clone();
                    tokio::spawn(
                        async move { dog.within((30 + i % 7) * SECOND, pending::<()>()).await },
                    )
                })
                .collect();
            while dog.watched() < 10_000 {
                tokio::task::yield_now().await;
            }
            tasks.iter().for_each(|t| t.abort());
            for t in tasks {
                assert!(t.await.unwrap_err().is_cancelled());
            }
            assert_eq!(dog.watched(), 0, "round {round}");
            let watches = dog.shared.lock();
            assert_eq!(watches.len(), 1);
            assert_eq!(
                watches[0].slots.len(),
                10_000,
                "round {round}: slots reused"
            );
        }
    }

    /// The watch task ends when its policy is dropped, watching something or not.
    #[tokio::test(start_paused = true)]
    async fn the_watch_task_ends_with_its_watchdog() {
        let metrics = Handle::current().metrics();
        let before = metrics.num_alive_tasks();
        for watching in [false, true] {
            let dog = Watchdog::default();
            let _ = dog.within(SECOND, tokio::task::yield_now()).await;
            if watching {
                // An attempt in flight when the watch last looked; it ends without it.
                let mut attempt = Box::pin(dog.within(30 * SECOND, pending::<()>()));
                std::future::poll_fn(|cx| {
                    assert!(attempt.as_mut().poll(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
                tokio::task::yield_now().await;
                drop(attempt);
            }
            assert_eq!(
                metrics.num_alive_tasks(),
                before + 1,
                "watching: {watching}"
            );
            drop(dog);
            tokio::task::yield_now().await;
            assert_eq!(metrics.num_alive_tasks(), before, "watching: {watching}");
        }
    }

    /// A runtime left idle (its watch task never runs) or shut down does not hold back
    /// another runtime's deadlines.
    #[test]
    fn each_runtime_has_its_own_watch() {
        let paused = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap()
        };
        let dog = Watchdog::default();
        let idle = paused();
        idle.block_on(async {
            // Pending on its first poll: watched, so the runtime gets its watch task.
            assert!(dog.within(SECOND, tokio::task::yield_now()).await.is_ok());
        });
        let hung = |rt: &tokio::runtime::Runtime| {
            rt.block_on(async {
                let start = Instant::now();
                let cut =
                    tokio::time::timeout(5 * SECOND, dog.within(2 * SECOND, pending::<()>())).await;
                (matches!(cut, Ok(Err(Cut))), start.elapsed())
            })
        };
        let other = paused();
        assert_eq!(hung(&other), (true, 2 * SECOND));
        drop(idle);
        assert_eq!(
            dog.shared.lock().len(),
            1,
            "the idle runtime's watch went with it"
        );
        drop(other);
        assert_eq!(hung(&paused()), (true, 2 * SECOND));
    }
}
