//! Pacing of the backfill against live traffic. The service records how long each recall and
//! remember took ([`ForegroundLatency`]); between batches the [`Pacer`] compares their recent
//! p99 with the p99 from before the backfill started. While it holds, the backfill does not
//! pause at all; while it is more than [`RISE`] times the baseline, the pause doubles (up to
//! [`MAX_PAUSE`]), and it halves again once the latency is back.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Foreground p99 above this multiple of the baseline counts as a rise.
pub const RISE: f64 = 1.5;
/// The longest pause between batches.
pub const MAX_PAUSE: Duration = Duration::from_secs(2);
/// The first pause after a rise.
const FIRST_PAUSE: Duration = Duration::from_millis(20);
/// Samples needed in the window before the latency is trusted (fewer: no traffic to protect).
const MIN_SAMPLES: usize = 8;
/// How far back the recent p99 looks.
pub const WINDOW: Duration = Duration::from_secs(5);
/// Samples kept.
const KEPT: usize = 1024;

/// Recent foreground request latencies, recorded by the service.
#[derive(Debug, Default)]
pub struct ForegroundLatency {
    samples: Mutex<VecDeque<(Instant, Duration)>>,
}

impl ForegroundLatency {
    pub(crate) fn record(&self, took: Duration) {
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        if samples.len() >= KEPT {
            samples.pop_front();
        }
        samples.push_back((Instant::now(), took));
    }

    /// The p99 of the requests of the last `window`, or `None` with fewer than a handful.
    pub(crate) fn p99(&self, window: Duration) -> Option<Duration> {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let mut recent: Vec<Duration> = samples
            .iter()
            .filter(|(at, _)| at.elapsed() <= window)
            .map(|(_, took)| *took)
            .collect();
        if recent.len() < MIN_SAMPLES {
            return None;
        }
        recent.sort_unstable();
        let i = ((recent.len() as f64 * 0.99).ceil() as usize).clamp(1, recent.len()) - 1;
        Some(recent[i])
    }
}

/// How long to pause before each batch.
#[derive(Debug, Clone)]
pub enum Pacer {
    /// The same pause every time.
    Fixed(Duration),
    /// Pause only while the foreground p99 is above `RISE` × `baseline`.
    Adaptive {
        /// The foreground p99 before the backfill started (`None` until there was traffic).
        baseline: Option<Duration>,
        pause: Duration,
    },
}

impl Pacer {
    pub(crate) fn adaptive(baseline: Option<Duration>) -> Pacer {
        Pacer::Adaptive {
            baseline,
            pause: Duration::ZERO,
        }
    }

    /// The pause before the next batch, given the foreground p99 now (`None`: no traffic).
    pub(crate) fn next_pause(&mut self, p99: Option<Duration>) -> Duration {
        match self {
            Pacer::Fixed(pause) => *pause,
            Pacer::Adaptive { baseline, pause } => {
                let Some(now) = p99 else {
                    // Nobody is waiting on the table: no reason to hold back.
                    *pause = Duration::ZERO;
                    return *pause;
                };
                // The baseline is the lowest p99 seen without a rise (traffic that began only
                // after the backfill did takes its first p99), so a rise never becomes normal.
                let base = *baseline.get_or_insert(now);
                if now.as_secs_f64() > base.as_secs_f64() * RISE {
                    *pause = (*pause * 2).clamp(FIRST_PAUSE, MAX_PAUSE);
                } else {
                    *baseline = Some(base.min(now));
                    *pause /= 2;
                    if *pause < FIRST_PAUSE / 2 {
                        *pause = Duration::ZERO;
                    }
                }
                *pause
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    #[test]
    fn no_pause_without_traffic_or_while_latency_holds() {
        let mut p = Pacer::adaptive(ms(10));
        assert_eq!(p.next_pause(None), Duration::ZERO);
        assert_eq!(
            p.next_pause(ms(12)),
            Duration::ZERO,
            "12 ms is within 1.5 × 10 ms"
        );
        assert_eq!(p.next_pause(ms(15)), Duration::ZERO);
    }

    #[test]
    fn backs_off_while_p99_rises_and_recovers_after() {
        let mut p = Pacer::adaptive(ms(10));
        let rising: Vec<Duration> = (0..9).map(|_| p.next_pause(ms(30))).collect();
        assert_eq!(rising[0], Duration::from_millis(20));
        assert_eq!(rising[1], Duration::from_millis(40));
        assert!(rising.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*rising.last().unwrap(), MAX_PAUSE, "capped");
        // Back to normal: the pause halves each batch down to nothing.
        let mut last = MAX_PAUSE;
        for _ in 0..20 {
            let next = p.next_pause(ms(11));
            assert!(next <= last / 2 + Duration::from_millis(1));
            last = next;
        }
        assert_eq!(last, Duration::ZERO);
    }

    #[test]
    fn the_baseline_only_falls() {
        let mut p = Pacer::adaptive(None);
        assert_eq!(
            p.next_pause(ms(20)),
            Duration::ZERO,
            "first traffic sets the baseline"
        );
        assert_eq!(p.next_pause(ms(8)), Duration::ZERO);
        // 8 ms is the baseline now: 20 ms is a rise.
        assert!(p.next_pause(ms(20)) > Duration::ZERO);
    }

    #[test]
    fn fixed_pacing_ignores_latency() {
        let mut p = Pacer::Fixed(Duration::from_millis(100));
        assert_eq!(p.next_pause(None), Duration::from_millis(100));
        assert_eq!(p.next_pause(ms(1000)), Duration::from_millis(100));
    }

    #[test]
    fn p99_needs_a_handful_of_recent_samples() {
        let l = ForegroundLatency::default();
        for _ in 0..5 {
            l.record(Duration::from_millis(5));
        }
        assert_eq!(l.p99(WINDOW), None);
        for i in 0..95 {
            l.record(Duration::from_millis(if i == 94 { 50 } else { 5 }));
        }
        assert_eq!(
            l.p99(WINDOW),
            Some(Duration::from_millis(5)),
            "one slow request in 100"
        );
        l.record(Duration::from_millis(60));
        assert_eq!(l.p99(WINDOW), Some(Duration::from_millis(50)));
    }
}
