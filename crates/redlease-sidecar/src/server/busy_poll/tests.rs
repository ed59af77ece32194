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

/// Whether a request arriving at `at` is polled, whether it starts a spell, and its arrival.
fn arrive(policy: &mut Policy, at: Instant) -> (bool, bool, Arrival) {
    let (arrival, start) = policy.arrive(at);
    (arrival.polled, start, arrival)
}

/// A request that arrives at `at`, waits while the polling takes a turn, and is answered
/// `took` later: whether it was polled, and whether it was answered in its window.
fn cycle(policy: &mut Policy, at: Instant, took: Duration) -> (bool, Option<bool>) {
    let (polled, _, arrival) = arrive(policy, at);
    policy.keep_polling(at + took / 2);
    let in_window = policy.answer(arrival, at + took).in_window;
    policy.keep_polling(at + took);
    (polled, in_window)
}

/// Requests one after another, `spacing` apart, each answered `took` after it came in.
struct Sequence {
    t0: Instant,
    spacing: Duration,
    sent: u32,
}

impl Sequence {
    fn new(spacing: Duration) -> Self {
        let (t0, sent) = (Instant::now(), 0);
        Sequence { t0, spacing, sent }
    }

    /// The next request (see [`cycle`]): whether it was polled, and answered in its window.
    fn next(&mut self, policy: &mut Policy, took: Duration) -> (bool, Option<bool>) {
        self.sent += 1;
        cycle(policy, self.t0 + self.spacing * self.sent, took)
    }
}

/// A request is polled from its arrival until its answer, and no longer.
#[test]
fn a_request_is_polled_from_its_arrival_to_its_answer() {
    let mut policy = request_window();
    let t0 = Instant::now();
    let (polled, start, arrival) = arrive(&mut policy, t0);
    assert!(polled && start, "polled, and a spell starts");
    assert!(policy.keep_polling(t0 + us(30)));
    let answered = policy.answer(arrival, t0 + us(60));
    assert_eq!((answered.in_window, answered.start), (Some(true), false));
    assert_eq!(answered.polled_after, None, "no answer window");
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
    arrive(&mut policy, t0);
    assert!(policy.keep_polling(t0 + WINDOW - us(1)));
    assert!(!policy.keep_polling(t0 + WINDOW));
    // A later request polls for its own window.
    let (polled, start, _) = arrive(&mut policy, t0 + us(500));
    assert!(polled && start);
    assert!(policy.keep_polling(t0 + us(550)));
}

/// One spell at a time: arrivals during a spell do not start another; the first one after it
/// ended does.
#[test]
fn only_an_arrival_outside_a_spell_starts_one() {
    let mut policy = request_window();
    let t0 = Instant::now();
    let (_, start, first) = arrive(&mut policy, t0);
    assert!(start);
    let (_, start, second) = arrive(&mut policy, t0 + us(10));
    assert!(!start, "a spell is on");
    assert!(policy.keep_polling(t0 + us(20)));
    policy.answer(first, t0 + us(30));
    assert!(
        policy.keep_polling(t0 + us(40)),
        "one request is still in progress"
    );
    policy.answer(second, t0 + us(50));
    assert!(!policy.keep_polling(t0 + us(60)));
    let (_, start, _) = arrive(&mut policy, t0 + us(70));
    assert!(start);
}

/// Requests answered after their window (masters too far for polling to pay) take the credit
/// away; then only one request in `PROBE_EVERY` is polled, and a probe answered in its window
/// brings polling back.
#[test]
fn polling_stops_where_it_does_not_pay_and_probes_for_its_return() {
    let mut policy = request_window();
    let mut requests = Sequence::new(us(1_000));
    // Masters a millisecond away: the credit the policy starts with goes in two requests.
    for _ in 0..INITIAL_CREDIT / OUTLASTED_COST {
        assert_eq!(requests.next(&mut policy, us(1_000)), (true, Some(false)));
    }
    let polled: Vec<bool> = (0..2 * PROBE_EVERY)
        .map(|_| requests.next(&mut policy, us(1_000)).0)
        .collect();
    let probes = polled.iter().filter(|polled| **polled).count();
    assert_eq!(probes, 2, "one probe in {PROBE_EVERY}");
    // The masters come near: the next probe pays, and every request after it is polled.
    while !requests.next(&mut policy, us(50)).0 {}
    assert!((0..10).all(|_| requests.next(&mut policy, us(50)) == (true, Some(true))));
}

/// After a run of requests answered in their window, a single slow one does not stop the
/// polling, nor one in four; a run of them does.
#[test]
fn credit_survives_one_slow_request_but_not_a_run_of_them() {
    let mut policy = request_window();
    let mut requests = Sequence::new(us(10_000));
    let mut next = |policy: &mut Policy, took: Duration| requests.next(policy, took).0;
    for _ in 0..CREDIT_MAX {
        assert!(next(&mut policy, us(50)));
    }
    assert!(next(&mut policy, us(5_000)), "a blocking acquisition");
    assert!(
        next(&mut policy, us(50)),
        "still polled after one slow request"
    );
    // One slow request in four: over two thirds answered in their window.
    for _ in 0..50 {
        let slow = next(&mut policy, us(5_000));
        let fast = (0..3).all(|_| next(&mut policy, us(50)));
        assert!(slow && fast, "polling stopped at one slow request in four");
    }
    let slow_run = (0..20).take_while(|_| next(&mut policy, us(5_000))).count();
    assert_eq!(
        slow_run,
        (CREDIT_MAX / OUTLASTED_COST) as usize,
        "a run of slow requests stops the polling"
    );
}

/// Requests the sidecar answers before the polling takes a turn (`/livez`, a refusal) waited
/// on nothing: they neither keep up nor bring back the polling.
#[test]
fn requests_answered_before_a_turn_leave_the_credit_alone() {
    let mut policy = request_window();
    let t0 = Instant::now();
    let mut at = t0;
    let mut quick = |policy: &mut Policy| {
        at += us(1_000);
        let (_, _, arrival) = arrive(policy, at);
        let in_window = policy.answer(arrival, at + us(5)).in_window;
        policy.keep_polling(at + us(5));
        in_window
    };
    // Health checks between acquisitions to far masters.
    for round in 0..20 {
        for _ in 0..10 {
            quick(&mut policy);
        }
        cycle(&mut policy, t0 + us(100_000 + 10_000 * round), us(1_000));
    }
    let polled = (0..2 * PROBE_EVERY)
        .filter(|i| {
            cycle(
                &mut policy,
                t0 + us(500_000 + 10_000 * u64::from(*i)),
                us(1_000),
            )
            .0
        })
        .count();
    assert!(
        polled <= 2,
        "{polled} requests to far masters polled amid health checks"
    );
    // With no credit, the probe among quick requests, answered in its window, brings none
    // back: the next request to the far masters is not polled.
    for _ in 0..PROBE_EVERY {
        quick(&mut policy);
    }
    assert!(!cycle(&mut policy, t0 + us(2_000_000), us(1_000)).0);
}

/// A turn that lost the CPU to a CPU-bound neighbour ends the spell and the credit; each one
/// makes the probes half as frequent, down to one in `MAX_PROBE_EVERY`; a probe answered in
/// its window brings the polling back, with probes as frequent as at first.
#[test]
fn a_cpu_bound_neighbour_stops_the_polling_and_spaces_the_probes() {
    let mut policy = request_window();
    let t0 = Instant::now();
    let mut requests = Sequence::new(us(1_000));
    let mut next = |policy: &mut Policy, took: Duration| requests.next(policy, took).0;
    // A request in progress; a turn of its spell loses the CPU: the spell is over.
    let (polled, start, arrival) = arrive(&mut policy, t0);
    assert!(polled && start);
    policy.cpu_taken();
    assert!(!policy.polling, "the spell is over");
    policy.answer(arrival, t0 + us(3_000));
    // Probes every 32 requests now: the first of them pays and brings the polling back.
    let unpolled = (0..1_000)
        .take_while(|_| !next(&mut policy, us(50)))
        .count();
    assert_eq!(unpolled, 2 * PROBE_EVERY as usize - 1);
    assert!(next(&mut policy, us(50)), "polling is back");
    // Each loss of the CPU halves the probes' frequency, down to the rarest.
    for _ in 0..20 {
        policy.cpu_taken();
    }
    let unpolled = (0..10_000)
        .take_while(|_| !next(&mut policy, us(50)))
        .count();
    assert_eq!(unpolled, MAX_PROBE_EVERY as usize - 1);
    // A probe that paid restores the first frequency.
    policy.cpu_taken();
    let unpolled = (0..10_000)
        .take_while(|_| !next(&mut policy, us(50)))
        .count();
    assert_eq!(unpolled, 2 * PROBE_EVERY as usize - 1);
}

fn answer_window() -> Policy {
    Policy::new(Windows {
        request: Duration::ZERO,
        after_answer: WINDOW,
    })
}

/// With a window after each answer, the thread polls for the app's next request, for the
/// window at most; that window holds without a request window (whose arrivals are then not
/// polled).
#[test]
fn an_answer_window_keeps_polling_for_the_next_request() {
    let mut policy = answer_window();
    let t0 = Instant::now();
    let (polled, start, arrival) = arrive(&mut policy, t0);
    assert!(!polled && !start, "no request window");
    let answered = policy.answer(arrival, t0 + us(40));
    assert_eq!(
        answered,
        Answered {
            in_window: None,
            polled_after: Some(true),
            start: true
        }
    );
    assert!(policy.keep_polling(t0 + us(40) + WINDOW - us(1)));
    assert!(!policy.keep_polling(t0 + us(40) + WINDOW));
}

/// Requests one at a time, each answered `took` after it came in, the next one coming `gap`
/// after that answer; `n` of them: whether the thread polled after each answer, and whether
/// each arrival came within the window after the answer polled after before it.
fn back_to_back(
    policy: &mut Policy,
    t0: Instant,
    gap: Duration,
    n: usize,
) -> (Vec<bool>, Vec<Option<bool>>) {
    let took = us(50);
    let (mut polled_after, mut judged) = (Vec::new(), Vec::new());
    let mut at = t0;
    for _ in 0..n {
        let (arrival, _) = policy.arrive(at);
        judged.push(arrival.next_in_window);
        let answered = policy.answer(arrival, at + took);
        polled_after.push(answered.polled_after == Some(true));
        policy.keep_polling(at + took + gap.min(WINDOW));
        at += took + gap;
    }
    (polled_after, judged)
}

/// An app that locks back to back (its next request within the window) keeps the thread
/// polling after every answer.
#[test]
fn an_app_locking_back_to_back_keeps_the_answer_window() {
    let mut policy = answer_window();
    let (polled_after, judged) = back_to_back(&mut policy, Instant::now(), us(30), 200);
    assert!(polled_after.iter().all(|&polled| polled));
    assert_eq!(judged[0], None, "no answer before the first request");
    assert!(judged[1..].iter().all(|&j| j == Some(true)));
}

/// Requests further apart than the window stop the polling after answers after two of
/// them; one answer in `PROBE_EVERY` is polled after all the same, and a probe followed by a
/// request in its window brings the polling back.
#[test]
fn requests_further_apart_stop_the_answer_window_and_probes_bring_it_back() {
    let mut policy = answer_window();
    let t0 = Instant::now();
    let (polled_after, judged) = back_to_back(&mut policy, t0, us(500), 400);
    let first_unpolled = polled_after.iter().position(|&p| !p).expect("it stops");
    assert_eq!(
        first_unpolled, 2,
        "two windows outlasted stop it, one does not"
    );
    assert_eq!(judged[1], Some(false));
    let later = &polled_after[first_unpolled..];
    let probes = later.iter().filter(|&&p| p).count();
    assert_eq!(probes, later.len() / PROBE_EVERY as usize, "{later:?}");
    // The app speeds up: the next probe pays, and the thread polls after every answer again.
    let (polled_after, _) = back_to_back(&mut policy, t0 + us(1_000_000), us(30), 40);
    let back = polled_after.iter().position(|&p| p).expect("a probe");
    assert!(back < PROBE_EVERY as usize);
    assert!(polled_after[back..].iter().all(|&polled| polled));
}

/// The answer window's credit is its own: masters too far for the request window do not stop
/// the polling for an app's next request, nor the other way round.
#[test]
fn the_two_windows_keep_credits_of_their_own() {
    // With both windows, 100 requests each answered `took` after it came in, the next one
    // coming `gap` after that answer: whether the last was polled, and polled after.
    let last_of_100 = |took: Duration, gap: Duration| {
        let mut policy = Policy::new(Windows {
            request: WINDOW,
            after_answer: WINDOW,
        });
        let mut at = Instant::now();
        let mut last = None;
        for _ in 0..100 {
            let (arrival, _) = policy.arrive(at);
            policy.keep_polling(at + us(10));
            let answered = policy.answer(arrival, at + took);
            last = Some((arrival.polled, answered.polled_after));
            at += took + gap;
        }
        last
    };
    // Masters 300 µs away, an app whose next request comes 20 µs after each answer.
    assert_eq!(last_of_100(us(300), us(20)), Some((false, Some(true))));
    // Masters near, an app whose requests come 2 ms apart.
    assert_eq!(last_of_100(us(50), us(1_950)), Some((true, Some(false))));
}

/// A CPU-bound neighbour ends the answer window's credit too, and spaces its probes.
#[test]
fn a_cpu_bound_neighbour_stops_the_answer_window() {
    let mut policy = answer_window();
    let t0 = Instant::now();
    let (arrival, _) = policy.arrive(t0);
    assert_eq!(policy.answer(arrival, t0 + us(50)).polled_after, Some(true));
    policy.cpu_taken();
    assert!(!policy.keep_polling(t0 + us(60)), "the spell is over");
    // The next request comes within the window all the same: it is judged so, but the answer
    // polled after before the loss earns no credit.
    let (arrival, _) = policy.arrive(t0 + us(70));
    assert_eq!(arrival.next_in_window, Some(true));
    assert_eq!(
        policy.answer(arrival, t0 + us(120)).polled_after,
        Some(false)
    );
    // Back to back all the same: one answer in 32 is polled after, until one pays.
    let (polled_after, _) = back_to_back(&mut policy, t0 + us(1_000), us(30), 100);
    let first = polled_after.iter().position(|&p| p).expect("a probe");
    assert_eq!(
        first,
        2 * PROBE_EVERY as usize - 2,
        "one answer went out before"
    );
    assert!(polled_after[first + 1..].iter().all(|&polled| polled));
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

/// A run of a scenario on a runtime in which a turn lost the CPU (the host's scheduler took
/// the thread for [`CPU_TAKEN`]): the policy rightly ends its spell then, so the run proves
/// nothing about the scenario.
struct Disturbed;

/// `Err(Disturbed)` once a turn of `busy` lost the CPU, else checks `holds`.
fn check(busy: &BusyPoll, holds: bool, what: &str) -> Result<(), Disturbed> {
    if busy.policy().cpu_losses > 0 {
        return Err(Disturbed);
    }
    assert!(holds, "{what}");
    Ok(())
}

/// Runs `scenario` on a fresh polling task until a run is not disturbed (at most 20 runs: a
/// host that takes the CPU every time fails the test).
async fn undisturbed<F, Fut>(windows: Windows, scenario: F)
where
    F: Fn(Arc<BusyPoll>) -> Fut,
    Fut: std::future::Future<Output = Result<(), Disturbed>>,
{
    for _ in 0..20 {
        let busy = BusyPoll::new(windows).expect("a window");
        let task = tokio::spawn(Arc::clone(&busy).run());
        let outcome = scenario(busy).await;
        task.abort();
        if outcome.is_ok() {
            return;
        }
    }
    panic!("every run lost the CPU to the host");
}

/// On a runtime: a request's arrival has the task take turns, its answer ends the spell, and
/// a request never answered is polled for its window only.
#[tokio::test(flavor = "current_thread")]
async fn spells_end_with_the_answer_or_the_window() {
    let windows = Windows {
        request: Duration::from_millis(5),
        after_answer: Duration::ZERO,
    };
    undisturbed(windows, |busy| async move {
        let turns = || busy.policy().turns;
        let polling = || busy.policy().polling;
        tokio::task::yield_now().await;
        check(&busy, turns() == 0, "no spell before a request")?;
        let first = busy.arrive();
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        check(&busy, turns() > 0, "an arrival starts a spell")?;
        busy.answer(first);
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        check(&busy, !polling(), "the answer ended the spell")?;
        let after = turns();
        tokio::task::yield_now().await;
        check(&busy, turns() == after, "no turns between spells")?;

        let _never_answered = busy.arrive();
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        check(&busy, turns() > after, "a second arrival starts a spell")?;
        tokio::time::sleep(Duration::from_millis(50)).await;
        check(&busy, !polling(), "the spell outlived its window")
    })
    .await;
}

#[test]
fn an_arrival_ends_the_answer_window() {
    let mut policy = Policy::new(Windows {
        request: WINDOW,
        after_answer: WINDOW,
    });
    let mut at = Instant::now();
    // Masters 300 µs away spend the request window's credit; the app's next request comes
    // 20 µs after each answer.
    for _ in 0..20 {
        let (arrival, _) = policy.arrive(at);
        policy.keep_polling(at + us(10));
        policy.answer(arrival, at + us(300));
        at += us(320);
    }
    let (arrival, _) = policy.arrive(at);
    assert!(!arrival.polled, "the request window stopped");
    assert!(
        !policy.keep_polling(at + us(10)),
        "the answer window's polling ended with the arrival"
    );
    let answered = policy.answer(arrival, at + us(300));
    assert_eq!(
        answered.polled_after,
        Some(true),
        "it polls after answers still"
    );
    assert!(policy.keep_polling(at + us(310)));
}

/// A request in progress when a turn lost the CPU earns no credit when it is answered in its
/// window, and leaves the probes as spaced as the loss made them.
#[test]
fn a_request_in_progress_at_a_lost_turn_earns_no_credit() {
    let mut policy = request_window();
    let t0 = Instant::now();
    let (polled, _, arrival) = arrive(&mut policy, t0);
    assert!(polled);
    policy.keep_polling(t0 + us(10));
    policy.cpu_taken();
    assert_eq!(policy.answer(arrival, t0 + us(60)).in_window, Some(true));
    let mut requests = Sequence::new(us(1_000));
    let unpolled = (0..1_000)
        .take_while(|_| !requests.next(&mut policy, us(50)).0)
        .count();
    assert_eq!(
        unpolled,
        2 * PROBE_EVERY as usize - 1,
        "no credit, probes spaced"
    );
}

/// On a runtime: an answer starts a spell, and the next request's arrival ends it.
#[tokio::test(flavor = "current_thread")]
async fn an_answer_starts_a_spell_and_the_next_request_ends_it() {
    let windows = Windows {
        request: Duration::ZERO,
        after_answer: Duration::from_millis(50),
    };
    undisturbed(windows, |busy| async move {
        let turns = || busy.policy().turns;
        let polling = || busy.policy().polling;
        let first = busy.arrive();
        tokio::task::yield_now().await;
        let what = "no request window: no spell for a request";
        check(&busy, turns() == 0, what)?;
        busy.answer(first);
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        let started = turns() > 0 && polling();
        check(&busy, started, "the answer started a spell")?;
        let _next = busy.arrive();
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        check(&busy, !polling(), "the next request ended it")
    })
    .await;
}
