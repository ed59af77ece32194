//! When a call to a master gives up: after a timeout of its own, or at a deadline shared by
//! every call of one fan-out.
//!
//! A shared deadline has no timer of its own: an engine's [`DeadlineKeeper`] passes every
//! fan-out's deadline on one timer ([`SharedDeadline::pass`] wakes every task still waiting:
//! a fan-out's, which registers once for all its calls, [`Deadline::Shared`]).
//! A fan-out registers its deadline in the keeper's queue and no tokio timer: a timer
//! registered per fan-out wrote to the runtime's eventfd whenever the runtime had parked with
//! no earlier timer (between two requests of a sidecar, about once per request), and took the
//! timer wheel's lock twice. The keeper's one timer stays armed at the earliest deadline still
//! queued, so a new fan-out's later deadline arms nothing; the keeper wakes at most once per
//! millisecond (the timer's resolution), whatever the rate of fan-outs.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use smallvec::SmallVec;
use tokio::sync::Notify;
use tokio::time::Instant;

/// When a call gives up.
#[derive(Clone, Debug)]
pub enum Deadline {
    /// This long after the call starts, on a timer of the call's own.
    After(Duration),
    /// Shared with the other calls of a fan-out, joined in one future whose driver passes
    /// it and registers its task with it before each poll of the calls
    /// ([`SharedDeadline::poll_passed`]): a call only reads whether it has passed, with no
    /// lock, where each call of a fan-out took the deadline's lock on every poll.
    Shared(Arc<SharedDeadline>),
}

impl Deadline {
    /// When a call under this deadline starts, for its round trip and its timeout: the
    /// fan-out's start for a shared deadline (one clock read for every master's call of a
    /// fan-out, which starts them all at once), now for one of its own.
    pub fn start(&self) -> Instant {
        match self {
            Self::After(_) => Instant::now(),
            Self::Shared(shared) => shared.start,
        }
    }

    /// `call`'s output, or `Err(())` once the deadline has passed (measured from `start` for
    /// [`Deadline::After`]).
    pub async fn run<F: Future>(&self, start: Instant, call: F) -> Result<F::Output, ()> {
        match self {
            Self::After(timeout) => {
                // Boxed: only probes and preparation steps take their own timer; inline, the
                // timer would enlarge every fan-out call's future.
                let timed = Box::pin(tokio::time::timeout_at(start + *timeout, call));
                timed.await.map_err(drop)
            }
            Self::Shared(shared) => {
                let mut call = std::pin::pin!(call);
                poll_fn(|cx| {
                    if let Poll::Ready(output) = call.as_mut().poll(cx) {
                        return Poll::Ready(Ok(output));
                    }
                    if shared.has_passed() {
                        return Poll::Ready(Err(()));
                    }
                    Poll::Pending
                })
                .await
            }
        }
    }
}

/// A deadline several calls wait on, passed by whoever drives them.
#[derive(Debug)]
pub struct SharedDeadline {
    /// When it was made: the start of the fan-out's calls.
    start: Instant,
    /// Set under `waiting`'s lock, before the waiting tasks are woken (so a task registering
    /// under that lock either sees it or is woken); read without the lock by the calls of a
    /// [`Deadline::Shared`].
    passed: AtomicBool,
    waiting: Mutex<Waiting>,
}

#[derive(Debug, Default)]
struct Waiting {
    /// The tasks waiting: one for a fan-out's joined calls, two once its caller has gone and
    /// the calls left run in a task of their own.
    wakers: SmallVec<[Waker; 2]>,
}

impl SharedDeadline {
    /// A deadline starting now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            passed: AtomicBool::new(false),
            waiting: Mutex::default(),
        })
    }

    /// Marks the deadline passed and wakes every call waiting on it.
    pub fn pass(&self) {
        let wakers = {
            let mut waiting = self.lock();
            self.passed.store(true, AtomicOrdering::Release);
            std::mem::take(&mut waiting.wakers)
        };
        for waker in wakers {
            waker.wake();
        }
    }

    /// Whether it has passed, read without waiting on anything.
    pub fn has_passed(&self) -> bool {
        self.passed.load(AtomicOrdering::Acquire)
    }

    /// Ready once passed; until then `cx` is woken when it passes. The driver of calls under
    /// a [`Deadline::Shared`] calls this before each poll of them.
    pub fn poll_passed(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut waiting = self.lock();
        if self.has_passed() {
            return Poll::Ready(());
        }
        // The no-op waker (a fan-out's calls polled outside a task) would wake nothing.
        let waker = cx.waker();
        let kept = |w: &Waker| w.will_wake(waker);
        if !waker.will_wake(Waker::noop()) && !waiting.wakers.iter().any(kept) {
            waiting.wakers.push(waker.clone());
        }
        Poll::Pending
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        // A list of wakers: consistent whatever a panicking holder left.
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Passes the shared deadlines of an engine's fan-outs on one timer, run by a task of its
/// own on the runtime of the first fan-out that needs it (again on another runtime if that
/// one ended). A fan-out on another runtime while it runs gets a timer task of its own on
/// that runtime. The task ends with the keeper.
pub struct DeadlineKeeper {
    shared: Arc<KeeperShared>,
}

struct KeeperShared {
    queue: Mutex<Queue>,
    /// Tells the task that a deadline earlier than its timer came, or that the keeper is gone.
    rearm: Notify,
}

#[derive(Default)]
struct Queue {
    /// Deadlines not passed yet, the earliest first; one whose fan-out ended is dropped when
    /// its instant comes.
    pending: BinaryHeap<Pending>,
    /// The instant the task's timer is set for; `None` while it waits for a deadline.
    armed: Option<Instant>,
    /// The runtime of the task that keeps this queue; `None` while no task does (before the
    /// first deadline, or after its runtime ended).
    runtime: Option<tokio::runtime::Id>,
    /// The keeper was dropped: the task ends.
    closed: bool,
}

struct Pending {
    at: Instant,
    deadline: Weak<SharedDeadline>,
}

impl DeadlineKeeper {
    /// A keeper with no deadline yet (its task starts with the first).
    pub fn new() -> Self {
        Self {
            shared: Arc::new(KeeperShared {
                queue: Mutex::new(Queue::default()),
                rearm: Notify::new(),
            }),
        }
    }

    /// A deadline passed at `at`. Outside a runtime (nothing could drive the calls) it is
    /// passed at once.
    pub fn deadline(&self, at: Instant) -> Arc<SharedDeadline> {
        let deadline = SharedDeadline::new();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            deadline.pass();
            return deadline;
        };
        let pending = Pending {
            at,
            deadline: Arc::downgrade(&deadline),
        };
        let mut queue = self.shared.lock();
        let start = match queue.runtime {
            None => true,
            Some(keepers) if keepers == runtime.id() => false,
            Some(_) => {
                // The keeper runs on another runtime, which may not be driven now (a
                // current-thread runtime between two `block_on`s): this deadline gets a timer
                // of its own on the runtime that drives its calls.
                drop(queue);
                runtime.spawn(async move {
                    tokio::time::sleep_until(pending.at).await;
                    pending.pass();
                });
                return deadline;
            }
        };
        // Idle (no timer), or this one comes first: the task sets its timer again.
        let rearm = !start && queue.armed.is_none_or(|armed| at < armed);
        if start {
            queue.runtime = Some(runtime.id());
            queue.armed = None;
        }
        queue.pending.push(pending);
        drop(queue);
        if start {
            // Made before the task: a task dropped unpolled, with its runtime, drops it too
            // (and takes the queue's lock: not held here).
            let running = Running(Arc::clone(&self.shared));
            runtime.spawn(keep(running));
        } else if rearm {
            self.shared.rearm.notify_one();
        }
        deadline
    }
}

impl Default for DeadlineKeeper {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for DeadlineKeeper {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.rearm.notify_one();
    }
}

impl KeeperShared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Pushes and pops of whole entries and flags: a poisoned queue is still consistent.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The keeper's task, as long as it lives: dropped with its runtime, it leaves the queue to
/// the next task started.
struct Running(Arc<KeeperShared>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.lock().runtime = None;
    }
}

/// The keeper's task: passes every deadline whose instant came, then sleeps until the next
/// one or until an earlier one is queued.
async fn keep(running: Running) {
    let shared = &running.0;
    let mut timer = std::pin::pin!(tokio::time::sleep_until(Instant::now()));
    // Passed after the lock is let go (their wakers run no code of the keeper's, but need not
    // wait on it either); kept from one turn to the next.
    let mut due: Vec<Pending> = Vec::new();
    loop {
        let next = {
            let mut queue = shared.lock();
            if queue.closed {
                return;
            }
            let now = Instant::now();
            while queue.pending.peek().is_some_and(|p| p.at <= now) {
                if let Some(pending) = queue.pending.pop() {
                    due.push(pending);
                }
            }
            queue.armed = queue.pending.peek().map(|p| p.at);
            queue.armed
        };
        for pending in due.drain(..) {
            pending.pass();
        }
        match next {
            Some(at) => {
                timer.as_mut().reset(at);
                tokio::select! {
                    biased;
                    () = shared.rearm.notified() => {}
                    () = timer.as_mut() => {}
                }
            }
            None => shared.rearm.notified().await,
        }
    }
}

impl Pending {
    /// Passes the deadline, unless its fan-out is gone.
    fn pass(&self) {
        if let Some(deadline) = self.deadline.upgrade() {
            deadline.pass();
        }
    }
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    /// Reversed: the heap's greatest is the earliest instant.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The deadline keeps one waker per task that waits on it, and none for the no-op waker
    /// of a fan-out's calls polled outside a task.
    #[test]
    fn one_waker_per_waiting_task_and_none_for_the_no_op() {
        struct Count(std::sync::atomic::AtomicU32);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let shared = SharedDeadline::new();
        let kept = || shared.lock().wakers.len();
        assert!(shared
            .poll_passed(&mut Context::from_waker(Waker::noop()))
            .is_pending());
        assert_eq!(kept(), 0);
        let counts: Vec<_> = (0..2)
            .map(|_| Arc::new(Count(Default::default())))
            .collect();
        let wakers: Vec<Waker> = counts.iter().map(|c| Waker::from(Arc::clone(c))).collect();
        for waker in wakers.iter().chain(&wakers) {
            assert!(shared
                .poll_passed(&mut Context::from_waker(waker))
                .is_pending());
        }
        assert_eq!(kept(), 2);
        shared.pass();
        for count in &counts {
            assert_eq!(count.0.load(std::sync::atomic::Ordering::Relaxed), 1);
        }
        assert!(shared
            .poll_passed(&mut Context::from_waker(Waker::noop()))
            .is_ready());
    }

    /// `future` polled as a fan-out drives its calls: its task registered with `shared`
    /// before each poll.
    async fn registered<F: Future>(shared: &SharedDeadline, future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        poll_fn(|cx| {
            let _ = shared.poll_passed(cx);
            future.as_mut().poll(cx)
        })
        .await
    }

    /// `call` under `shared`, driven as a fan-out drives its calls.
    async fn driven<F: Future>(
        shared: &Arc<SharedDeadline>,
        start: Instant,
        call: F,
    ) -> Result<F::Output, ()> {
        let deadline = Deadline::Shared(Arc::clone(shared));
        registered(shared, deadline.run(start, call)).await
    }

    /// A call answered before the deadline passes gets its answer; one still waiting when it
    /// passes gives up, woken by `pass` alone (no timer of its own).
    #[tokio::test(start_paused = true)]
    async fn calls_give_up_when_the_shared_deadline_passes() {
        let start = Instant::now();
        let shared = SharedDeadline::new();
        assert_eq!(driven(&shared, start, async { 7 }).await, Ok(7));

        let (answer, answered) = tokio::sync::oneshot::channel::<u32>();
        let waiting = tokio::spawn({
            let shared = Arc::clone(&shared);
            async move { driven(&shared, start, answered).await }
        });
        let never = tokio::spawn({
            let shared = Arc::clone(&shared);
            async move { driven(&shared, start, std::future::pending::<()>()).await }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            !waiting.is_finished() && !never.is_finished(),
            "no timer of their own"
        );
        shared.pass();
        assert_eq!(never.await.unwrap(), Err(()));
        assert_eq!(waiting.await.unwrap(), Err(()));
        drop(answer);
        assert_eq!(
            driven(&shared, start, async { 8 }).await,
            Ok(8),
            "a ready call still answers"
        );
        assert_eq!(
            driven(&shared, start, std::future::pending::<()>()).await,
            Err(()),
            "a passed deadline refuses to wait"
        );
    }

    /// Calls joined in one future only read the deadline: the task driving them, registered
    /// with it before each poll, is woken when it passes, and every call still waiting gives
    /// up; a call answered first keeps its answer.
    #[tokio::test(start_paused = true)]
    async fn joined_calls_give_up_when_their_driver_is_woken() {
        let start = Instant::now();
        let shared = SharedDeadline::new();
        let deadline = Deadline::Shared(Arc::clone(&shared));
        let (answer, answered) = tokio::sync::oneshot::channel::<u32>();
        let driver = tokio::spawn({
            let (shared, deadline) = (Arc::clone(&shared), deadline.clone());
            async move {
                let calls = futures_util::future::join(
                    deadline.run(start, answered),
                    deadline.run(start, std::future::pending::<()>()),
                );
                registered(&shared, calls).await
            }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!driver.is_finished(), "no timer of their own");
        answer.send(5).unwrap();
        tokio::task::yield_now().await;
        assert!(!driver.is_finished(), "one call still waits");
        assert!(!shared.has_passed());
        shared.pass();
        assert!(shared.has_passed());
        let woken = tokio::time::timeout(Duration::from_secs(1), driver).await;
        let (first, second) = woken.expect("the driver is woken").unwrap();
        assert_eq!(first, Ok(Ok(5)));
        assert_eq!(second, Err(()));
        let unregistered = deadline.run(start, std::future::pending::<()>());
        assert_eq!(
            unregistered.await,
            Err(()),
            "a passed deadline refuses to wait"
        );
    }

    /// `After` times a call from its own start.
    #[tokio::test(start_paused = true)]
    async fn a_deadline_of_its_own_times_from_the_start() {
        let start = Instant::now();
        let deadline = Deadline::After(Duration::from_millis(5));
        let late = deadline.run(start, std::future::pending::<()>()).await;
        assert_eq!(late, Err(()));
        assert!(Instant::now() >= start + Duration::from_millis(5));
    }

    /// Each deadline passes at its own instant, an earlier one queued after a later one too
    /// (the timer is set again), and one whose fan-out is gone is dropped unharmed.
    #[tokio::test(start_paused = true)]
    async fn the_keeper_passes_each_deadline_at_its_instant() {
        let keeper = DeadlineKeeper::new();
        let start = Instant::now();
        let late = keeper.deadline(start + Duration::from_millis(300));
        let gone = keeper.deadline(start + Duration::from_millis(50));
        drop(gone);
        let early = keeper.deadline(start + Duration::from_millis(100));
        let passed = |d: &Arc<SharedDeadline>| d.has_passed();
        let waiter = {
            let late = Arc::clone(&late);
            tokio::spawn(async move { driven(&late, start, std::future::pending::<()>()).await })
        };
        tokio::time::sleep(Duration::from_millis(99)).await;
        assert!(!passed(&early) && !passed(&late));
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(passed(&early) && !passed(&late));
        tokio::time::sleep(Duration::from_millis(198)).await;
        assert!(!passed(&late));
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(passed(&late));
        assert_eq!(waiter.await.unwrap(), Err(()), "the waiting call gave up");
        let after_idle = keeper.deadline(Instant::now() + Duration::from_millis(10));
        tokio::time::sleep(Duration::from_millis(11)).await;
        assert!(passed(&after_idle), "an idle keeper takes a new deadline");
    }

    /// A current-thread runtime with a timer, of a test's own.
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    /// The keeper's task ends with the keeper; a runtime that ended takes its task along, and
    /// the next deadline starts one on the runtime at hand; outside any runtime, a deadline
    /// is passed at once.
    #[test]
    fn the_keeper_task_follows_its_runtime_and_its_keeper() {
        let keeper = DeadlineKeeper::new();
        let first = runtime();
        let stranded =
            first.block_on(async { keeper.deadline(Instant::now() + Duration::from_secs(3600)) });
        drop(first);
        assert!(
            keeper.shared.lock().runtime.is_none(),
            "the task ended with its runtime"
        );
        assert!(!stranded.has_passed());
        let second = runtime();
        second.block_on(async {
            let next = keeper.deadline(Instant::now() + Duration::from_millis(20));
            tokio::time::sleep(Duration::from_millis(40)).await;
            assert!(next.has_passed(), "a new task on this runtime");
            let shared = Arc::clone(&keeper.shared);
            drop(keeper);
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            assert_eq!(
                Arc::strong_count(&shared),
                1,
                "the task ended with its keeper"
            );
        });
        let outside = DeadlineKeeper::new().deadline(Instant::now() + Duration::from_secs(1));
        assert!(outside.has_passed(), "no runtime: passed at once");
    }

    /// While the keeper's task runs on a runtime nobody drives (a current-thread runtime
    /// between two `block_on`s), a fan-out's deadline on another runtime still passes at its
    /// instant, on a timer of that runtime.
    #[test]
    fn a_deadline_passes_on_its_own_runtime_while_the_keepers_is_idle() {
        let keeper = DeadlineKeeper::new();
        let idle = runtime();
        idle.block_on(async {
            keeper.deadline(Instant::now() + Duration::from_secs(3600));
            tokio::task::yield_now().await;
        });
        assert!(
            keeper.shared.lock().runtime.is_some(),
            "the keeper's task lives on, not driven"
        );
        let other = runtime();
        other.block_on(async {
            let deadline = keeper.deadline(Instant::now() + Duration::from_millis(20));
            let wait = driven(&deadline, Instant::now(), std::future::pending::<()>());
            let gave_up = tokio::time::timeout(Duration::from_secs(5), wait).await;
            assert_eq!(gave_up, Ok(Err(())), "passed on this runtime's timer");
        });
        drop(idle);
    }
}
