//! `redlease serve`'s busy polling, judged on a real process's counters, sleeps and CPU time:
//! ignored in the suite's parallel run, and run alone after it by `scripts/test.sh`.

use std::time::Duration;

use redlease_testkit::TestFleet;

use super::{free_loopback_addr, ServeProcess};

/// `redlease serve`'s busy polling. Off (both windows 0), it never polls. With a
/// request window, its thread polls from each request's arrival until its answer: it no longer
/// sleeps while the masters reply, every request is counted in
/// `sidecar_busy_poll_requests_total`, and it sleeps between requests. With a window after
/// each answer as well, it stays awake between requests that come back to back, and hardly
/// sleeps at all. Every way, it stops with the requests: idle, it spends next to no CPU.
///
/// What it judges depends on the masters answering within the window, so it runs alone: with
/// the rest of the suite on this machine's two vCPUs, masters starved of the CPU outlast the
/// window and the polling stops, as it should, for most of a run. Even alone, the test's own
/// client is a CPU-bound neighbour at times, which stops the polling as well
/// (`sidecar_busy_poll_cpu_lost_total`). So a configuration whose counters do not show the
/// windows at work is run again on a fresh sidecar, three runs at most. When the third run
/// met a neighbour as well, it is judged on what holds there too (every request counted, no
/// CPU spent idle); otherwise its counters must show the windows at work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing-sensitive: scripts/test.sh runs it alone, after the parallel suite"]
async fn busy_polling_follows_requests_and_stops_with_them() {
    const REQUEST: &str = "REDLEASE__RUNTIME__BUSY_POLL_US";
    const AFTER_ANSWER: &str = "REDLEASE__RUNTIME__BUSY_POLL_AFTER_ANSWER_US";
    const RUNS: u32 = 3;
    let fleet = TestFleet::start(3);
    let mut sleeps_without = None;
    let configurations: [(&str, &[(&str, &str)]); 3] = [
        ("off", &[(REQUEST, "0"), (AFTER_ANSWER, "0")]),
        (
            "while requests wait",
            &[(REQUEST, "1000"), (AFTER_ANSWER, "0")],
        ),
        (
            "after answers too",
            &[(REQUEST, "1000"), (AFTER_ANSWER, "1000")],
        ),
    ];
    for (polling, env) in configurations {
        for run_number in 1..=RUNS {
            let run = BusyPollRun::measure(&fleet, env).await;
            // A thread that kept polling would spend most of the 2 s (200 ticks) on the CPU.
            assert!(
                run.idle_ticks < 20,
                "{polling}: {} ticks of CPU in 2 s without a request",
                run.idle_ticks
            );
            let judged = match sleeps_without {
                None => {
                    assert_eq!(polling, "off", "the run without polling comes first");
                    run.judge_off()
                }
                Some(without) => run.judge_polling(polling, without),
            };
            match judged {
                Ok(()) => {
                    if polling == "off" {
                        sleeps_without = Some(run.sleeps);
                    }
                    break;
                }
                Err(failed) if run_number < RUNS => {
                    eprintln!("{polling}, run {run_number}: {failed}; again on a fresh sidecar");
                }
                Err(failed) if polling != "off" && run.cpu_lost > 0.0 => {
                    // Every run met a neighbour: the polling stopped as designed.
                    assert_eq!(run.requests, 201.0, "{polling}: requests counted");
                    eprintln!(
                        "{polling}: {failed} in each of {RUNS} runs, the last with {} turns lost \
                         to a neighbour; judged on the requests counted and the idle CPU alone",
                        run.cpu_lost
                    );
                }
                Err(failed) => panic!("{polling}, {RUNS} runs: {failed}"),
            }
        }
    }
}

/// What one run of `busy_polling_follows_requests_and_stops_with_them` saw: a fresh sidecar
/// with `env`, one acquisition, then 100 acquisitions and 100 releases one after another,
/// then two seconds idle.
struct BusyPollRun {
    /// Voluntary context switches of the sidecar over the 100 cycles.
    sleeps: u64,
    /// CPU ticks of the sidecar over the two idle seconds.
    idle_ticks: u64,
    /// Seconds from the sidecar's start to the end of the cycles.
    served_for: f64,
    /// `sidecar_busy_poll_seconds_total`.
    polled: f64,
    /// `sidecar_busy_poll_requests_total{outcome="answered_in_window"}`.
    answered: f64,
    /// `sidecar_busy_poll_requests_total{outcome="outlasted_window"}`.
    outlasted: f64,
    /// `sidecar_busy_poll_requests_total`, every outcome.
    requests: f64,
    /// `sidecar_busy_poll_answers_total{outcome="next_request_in_window"}`.
    next_in_window: f64,
    /// `sidecar_busy_poll_answers_total`, every outcome.
    answers: f64,
    /// `sidecar_busy_poll_cpu_lost_total`.
    cpu_lost: f64,
}

impl BusyPollRun {
    async fn measure(fleet: &TestFleet, env: &[(&str, &str)]) -> Self {
        // Scraped on the metrics listener, which does not count its own requests.
        let metrics_listen = free_loopback_addr();
        let mut env = env.to_vec();
        env.push(("REDLEASE__METRICS__LISTEN", &metrics_listen));
        let serve = ServeProcess::start_with_env(fleet, &[], std::process::Stdio::null(), &env);
        let pid = serve.child.id().unwrap();
        let started = tokio::time::Instant::now();
        let body = serde_json::json!({"owner": "t", "auto_renew": false});
        serve.acquire_when_up("busy-poll-first", body.clone()).await;
        let http = reqwest::Client::new();
        let base = format!("http://{}", serve.listen);
        let sleeps_before = voluntary_switches(pid);
        for round in 0..100 {
            let resource = format!("busy-poll-{round}");
            let (_, released) =
                crate::support::acquire_then_release(&http, &base, &resource, &body).await;
            assert_eq!(released, Some(200));
        }
        let sleeps = voluntary_switches(pid) - sleeps_before;
        // The last spell (1 ms at most) is over; then two seconds with no request.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let served_for = started.elapsed().as_secs_f64();
        let before = cpu_ticks(pid);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let idle_ticks = cpu_ticks(pid) - before;
        let metrics = http.get(format!("http://{metrics_listen}/metrics"));
        let text = metrics.send().await.unwrap().text().await.unwrap();
        assert_eq!(serve.terminate().await, Some(0));
        let sample = |series: &str| crate::support::sample(&text, series);
        let outcome = |kind: &str| {
            sample(&format!(
                "sidecar_busy_poll_requests_total{{outcome=\"{kind}\"}}"
            ))
        };
        let after_answer = |kind: &str| {
            sample(&format!(
                "sidecar_busy_poll_answers_total{{outcome=\"{kind}\"}}"
            ))
        };
        let (answered, outlasted) = (outcome("answered_in_window"), outcome("outlasted_window"));
        let next_in_window = after_answer("next_request_in_window");
        Self {
            sleeps,
            idle_ticks,
            served_for,
            polled: sample("sidecar_busy_poll_seconds_total"),
            answered,
            outlasted,
            requests: answered + outlasted + outcome("not_polled"),
            next_in_window,
            answers: next_in_window + after_answer("outlasted_window") + after_answer("not_polled"),
            cpu_lost: sample("sidecar_busy_poll_cpu_lost_total"),
        }
    }

    /// Both windows 0: nothing polled, nothing counted.
    fn judge_off(&self) -> Result<(), String> {
        let counted = [
            ("polled seconds", self.polled),
            ("requests", self.requests),
            ("answers", self.answers),
            ("turns lost", self.cpu_lost),
        ];
        match counted.iter().find(|(_, value)| *value != 0.0) {
            Some((what, value)) => Err(format!("{value} {what} counted with both windows 0")),
            None => Ok(()),
        }
    }

    /// A request window of 1 ms, and an answer window of 1 ms after answers too; `without`,
    /// the sleeps of the run without polling.
    fn judge_polling(&self, polling: &str, without: u64) -> Result<(), String> {
        // The first acquisition, then 100 acquisitions and 100 releases.
        if self.requests != 201.0 {
            return Err(format!("{} requests counted", self.requests));
        }
        // Masters on this machine answer within the millisecond, mostly: a fifth answered in
        // the window shows it at work.
        if self.answered < 40.0 {
            return Err(format!(
                "{} answered in their window, {} not",
                self.answered, self.outlasted
            ));
        }
        if !(0.000_01..self.served_for).contains(&self.polled) {
            return Err(format!("polled {} s of {} s", self.polled, self.served_for));
        }
        if polling == "while requests wait" {
            // Polling while requests wait, the thread sleeps only as they come in (about 200
            // times). Without polling it also sleeps for the masters' replies where they come
            // after it has gone to sleep (283 times in one run on a VM whose idle vCPUs halt
            // at once; 208 on one whose vCPUs poll before halting): no fewer sleeps to check
            // there. The counters above show the window at work.
            if self.answers != 0.0 {
                return Err(format!(
                    "{} answers counted with no answer window",
                    self.answers
                ));
            }
            return Ok(());
        }
        // Polling after answers too, hardly ever (9 in one run); more where a turn lost the
        // CPU for 500 µs to this debug build's client, which stops both windows for a while
        // (146 in one run, against 211 without polling).
        if self.sleeps >= without {
            return Err(format!(
                "the thread slept {} times, {without} times without polling",
                self.sleeps
            ));
        }
        // One client at a time: every answer but the last is judged by the request after it,
        // or counted as not polled after; its next request comes within the window.
        if !(200.0..=201.0).contains(&self.answers) {
            return Err(format!("{} answers counted", self.answers));
        }
        if self.next_in_window < 40.0 {
            return Err(format!(
                "{} answers followed by a request in the window",
                self.next_in_window
            ));
        }
        Ok(())
    }
}

/// Voluntary context switches of every thread of process `pid`: how often its threads slept.
fn voluntary_switches(pid: u32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let mut total = 0;
    for task in tasks {
        let status =
            std::fs::read_to_string(task.unwrap().path().join("status")).unwrap_or_default();
        total += status
            .lines()
            .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|count| count.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

/// User + system CPU time of process `pid`, in clock ticks (`/proc/<pid>/stat`).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which ends at the last ')': utime and stime are the
    // 14th and 15th fields of the line, the 12th and 13th after the name.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}
