//! The busy-polling policy: when a spell starts, how long it lasts, and when polling stops
//! paying; and the task's spells on a real runtime.

use super::*;

const WINDOW: Duration = Duration::from_micros(100);

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

fn request_window() -> Policy {
    Policy::new(Windows {
        request: WINDOW,
        after_answer: Duration::ZERO,
    })
}

fn arrival(at: Instant, polled: bool) -> Arrival {
    Arrival { at, polled }
}

/// A request is polled from its arrival until its answer, and no longer.
#[test]
fn a_request_is_polled_from_its_arrival_to_its_answer() {
    let mut policy = request_window();
    let t0 = Instant::now();
    assert_eq!(
        policy.arrive(t0),
        (true, true),
        "polled, and a spell starts"
    );
    assert!(policy.keep_polling(t0 + us(60)));
    let (in_window, start) = policy.answer(arrival(t0, true), t0 + us(60));
    assert_eq!((in_window, start), (Some(true), false));
    assert!(
        !policy.keep_polling(t0 + us(61)),
        "nothing in progress: the thread may sleep"
    );
}

/// An unanswered request is polled for its window only: a blocking acquisition that waits,
/// or masters that do not answer, do not keep the thread polling.
#[test]
fn polling_ends_with_the_window_even_unanswered() {
    let mut policy = request_window();
    let t0 = Instant::now();
    policy.arrive(t0);
    assert!(policy.keep_polling(t0 + WINDOW - us(1)));
    assert!(!policy.keep_polling(t0 + WINDOW));
    // A later request polls for its own window.
    assert_eq!(policy.arrive(t0 + us(500)), (true, true));
    assert!(policy.keep_polling(t0 + us(550)));
}

/// One spell at a time: arrivals during a spell do not start another; the first one after it
/// ended does.
#[test]
fn only_an_arrival_outside_a_spell_starts_one() {
    let mut policy = request_window();
    let t0 = Instant::now();
    assert_eq!(policy.arrive(t0), (true, true));
    assert_eq!(policy.arrive(t0 + us(10)), (true, false));
    assert!(policy.keep_polling(t0 + us(20)));
    policy.answer(arrival(t0, true), t0 + us(30));
    assert!(
        policy.keep_polling(t0 + us(40)),
        "one request is still in progress"
    );
    policy.answer(arrival(t0 + us(10), true), t0 + us(50));
    assert!(!policy.keep_polling(t0 + us(60)));
    assert_eq!(policy.arrive(t0 + us(70)), (true, true));
}

/// Requests answered after their window (masters too far for polling to pay) take the credit
/// away; then only one request in `PROBE_EVERY` is polled, and a probe answered in its window
/// brings polling back.
#[test]
fn polling_stops_where_it_does_not_pay_and_probes_for_its_return() {
    let mut policy = request_window();
    let mut t = Instant::now();
    let mut cycle = |policy: &mut Policy, took: Duration| {
        let (polled, _) = policy.arrive(t);
        let (in_window, _) = policy.answer(arrival(t, polled), t + took);
        policy.keep_polling(t + took);
        t += us(1_000);
        (polled, in_window)
    };
    // Masters a millisecond away: the credit the policy starts with goes in two requests.
    for _ in 0..INITIAL_CREDIT / OUTLASTED_COST {
        assert_eq!(cycle(&mut policy, us(1_000)), (true, Some(false)));
    }
    let polled: Vec<bool> = (0..2 * PROBE_EVERY)
        .map(|_| cycle(&mut policy, us(1_000)).0)
        .collect();
    let probes = polled.iter().filter(|polled| **polled).count();
    assert_eq!(probes, 2, "one probe in {PROBE_EVERY}");
    // The masters come near: the next probe pays, and every request after it is polled.
    while !cycle(&mut policy, us(50)).0 {}
    assert!((0..10).all(|_| cycle(&mut policy, us(50)) == (true, Some(true))));
}

/// After a run of requests answered in their window, a single slow one does not stop the
/// polling, nor one in four; a run of them does.
#[test]
fn credit_survives_one_slow_request_but_not_a_run_of_them() {
    let mut policy = request_window();
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut cycle = |policy: &mut Policy, took: Duration| {
        let at = t0 + us(1_000 * n);
        n += 1;
        let (polled, _) = policy.arrive(at);
        policy.answer(arrival(at, polled), at + took);
        polled
    };
    for _ in 0..CREDIT_MAX {
        assert!(cycle(&mut policy, us(50)));
    }
    assert!(cycle(&mut policy, us(5_000)), "a blocking acquisition");
    assert!(
        cycle(&mut policy, us(50)),
        "still polled after one slow request"
    );
    // One slow request in four: over two thirds answered in their window.
    for _ in 0..50 {
        let slow = cycle(&mut policy, us(5_000));
        let fast = (0..3).all(|_| cycle(&mut policy, us(50)));
        assert!(slow && fast, "polling stopped at one slow request in four");
    }
    let slow_run = (0..20)
        .take_while(|_| cycle(&mut policy, us(5_000)))
        .count();
    assert_eq!(
        slow_run,
        (CREDIT_MAX / OUTLASTED_COST) as usize,
        "a run of slow requests stops the polling"
    );
}

/// With a window after each answer, the thread polls for the app's next request; that window
/// holds without a request window (whose arrivals are then not polled).
#[test]
fn an_answer_window_keeps_polling_for_the_next_request() {
    let mut policy = Policy::new(Windows {
        request: Duration::ZERO,
        after_answer: WINDOW,
    });
    let t0 = Instant::now();
    assert_eq!(policy.arrive(t0), (false, false), "no request window");
    let (in_window, start) = policy.answer(arrival(t0, false), t0 + us(40));
    assert_eq!((in_window, start), (None, true));
    assert!(policy.keep_polling(t0 + us(40) + WINDOW - us(1)));
    assert!(!policy.keep_polling(t0 + us(40) + WINDOW));
}

#[test]
fn no_window_no_polling() {
    let none = Windows {
        request: Duration::ZERO,
        after_answer: Duration::ZERO,
    };
    assert!(BusyPoll::new(none).is_none());
}

/// Only a runtime of one thread polls: with more, the worker asleep holds the sockets.
#[test]
fn only_a_runtime_of_one_thread_polls() {
    let windows = Windows {
        request: WINDOW,
        after_answer: Duration::ZERO,
    };
    let runtime = |builder: &mut tokio::runtime::Builder| builder.build().unwrap();
    let one = runtime(&mut tokio::runtime::Builder::new_current_thread());
    assert!(one.block_on(async { BusyPoll::new(windows) }).is_some());
    let several = runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2));
    assert!(several.block_on(async { BusyPoll::new(windows) }).is_none());
    assert!(BusyPoll::new(windows).is_none(), "no runtime at all");
}

/// On a runtime: a request's arrival starts a spell, its answer ends it, and a request never
/// answered is polled for its window only.
#[tokio::test(flavor = "current_thread")]
async fn spells_end_with_the_answer_or_the_window() {
    let windows = Windows {
        request: Duration::from_millis(5),
        after_answer: Duration::ZERO,
    };
    let busy = BusyPoll::new(windows).expect("a window");
    let task = tokio::spawn(Arc::clone(&busy).run());
    let polling = || busy.policy().polling;

    let first = busy.arrive();
    tokio::task::yield_now().await;
    assert!(polling(), "an arrival starts a spell");
    busy.answer(first);
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
    assert!(!polling(), "the answer ended the spell");

    let _never_answered = busy.arrive();
    tokio::task::yield_now().await;
    assert!(polling());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!polling(), "the spell outlived its window");
    task.abort();
}
