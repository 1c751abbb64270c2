//! The discrete-event model: clients with their retry policies, a server with a capacity
//! and a queue, an outage.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode};
use ratewarden_client::{
    AdaptiveThrottle, Attempt, Backoff, Call, Next, Policy, RetryBudget, Settings, SplitMix64,
};
use ratewarden_core::{ManualClock, NANOS_PER_SEC};

/// The origin every simulated client calls.
const ORIGIN: &str = "http://server.sim";

/// The world: clients, server, outage.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Clients (each with its own policy: its own budget, its own throttle).
    pub clients: u32,
    /// Requests a second each client makes (Poisson arrivals).
    pub rate: f64,
    /// Requests a second the server completes.
    pub capacity: f64,
    /// The longest queue the server keeps, as waiting time; beyond it, it answers 503 at once.
    pub queue: Duration,
    /// When the outage starts (every attempt answered 503 until it ends).
    pub outage_at: Duration,
    /// How long it lasts.
    pub outage: Duration,
    /// When clients stop making new requests (retries in progress finish).
    pub duration: Duration,
    /// How long a client waits for an answer before giving the attempt up (the server
    /// still does the work: wasted).
    pub timeout: Duration,
    /// Network time each way.
    pub latency: Duration,
    /// Attempts per request for the retrying strategies.
    pub attempts: u32,
    /// The seed of arrivals and jitter.
    pub seed: u64,
}

impl Default for Scenario {
    /// The standard scenario: 4 clients at 100 requests a second against a server for 450,
    /// down from 10 s to 20 s, 40 s in all; 1 s timeouts, a 2 s queue, 5 attempts.
    fn default() -> Self {
        Self {
            clients: 4,
            rate: 100.0,
            capacity: 450.0,
            queue: Duration::from_secs(2),
            outage_at: Duration::from_secs(10),
            outage: Duration::from_secs(10),
            duration: Duration::from_secs(40),
            timeout: Duration::from_secs(1),
            latency: Duration::from_millis(5),
            attempts: 5,
            seed: 1,
        }
    }
}

/// How clients retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Strategy {
    /// One attempt.
    NoRetry,
    /// Retry at once.
    Immediate,
    /// Retry after 100 ms, every time.
    Fixed,
    /// 100 ms doubling to 10 s, no jitter.
    Exponential,
    /// 100 ms doubling to 10 s, full jitter.
    Jitter,
    /// Full jitter and the retry budget (20% + 10/s).
    Budget,
    /// Full jitter, the budget and adaptive throttling (K = 2 over 10 s).
    Throttling,
}

impl Strategy {
    /// Every strategy, from worst to best.
    pub const ALL: [Strategy; 7] = [
        Self::NoRetry,
        Self::Immediate,
        Self::Fixed,
        Self::Exponential,
        Self::Jitter,
        Self::Budget,
        Self::Throttling,
    ];

    /// Its name in tables and legends.
    pub fn name(&self) -> &'static str {
        match self {
            Self::NoRetry => "no retry",
            Self::Immediate => "immediate",
            Self::Fixed => "fixed 100ms",
            Self::Exponential => "exponential",
            Self::Jitter => "exp + full jitter",
            Self::Budget => "+ retry budget",
            Self::Throttling => "+ adaptive throttling",
        }
    }

    /// The client policy's settings for it.
    pub fn settings(&self, scenario: &Scenario, seed: u64) -> Settings {
        let base = Duration::from_millis(100);
        let cap = Duration::from_secs(10);
        let (backoff, budget, throttle) = match self {
            Self::NoRetry | Self::Immediate => (Backoff::Immediate, None, None),
            Self::Fixed => (Backoff::Fixed(base), None, None),
            Self::Exponential => (Backoff::Exponential { base, cap }, None, None),
            Self::Jitter => (Backoff::full_jitter(base, cap), None, None),
            Self::Budget => (
                Backoff::full_jitter(base, cap),
                Some(RetryBudget::default()),
                None,
            ),
            // The SRE book's two minutes would still be counting the outage long after
            // it: a window of the outage's order shows the mechanism at this scale.
            Self::Throttling => (
                Backoff::full_jitter(base, cap),
                Some(RetryBudget::default()),
                Some(AdaptiveThrottle::new(2.0, Duration::from_secs(10))),
            ),
        };
        Settings {
            max_attempts: if *self == Self::NoRetry {
                1
            } else {
                scenario.attempts
            },
            backoff,
            // Attempts and timeouts bound a request; no deadline on top.
            deadline: None,
            budget,
            throttle,
            adaptive_rate: false,
            pacing: false,
            seed,
        }
    }
}

/// One second of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Second {
    /// Requests made (arrivals).
    pub requests: u64,
    /// Attempts sent to the server: the offered load.
    pub attempts: u64,
    /// Requests that succeeded, counted when they did: the goodput.
    pub goodput: u64,
    /// Of the requests made this second, those that eventually succeeded.
    pub served: u64,
    /// Work the server did for clients that had already given up.
    pub wasted: u64,
    /// Requests refused by the client itself (adaptive throttling).
    pub refused: u64,
}

/// A run's outcome, second by second.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The strategy.
    pub strategy: Strategy,
    /// Each second.
    pub seconds: Vec<Second>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Answer {
    Ok,
    Unavailable,
    Timeout,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive(usize),
    Begin(usize),
    Send(usize),
    Answer(usize, Answer),
}

struct Flight {
    call: Call,
    client: usize,
    arrived: u64,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

struct Sim<'a> {
    scenario: &'a Scenario,
    clock: ManualClock,
    policies: Vec<Policy>,
    arrivals: Vec<SplitMix64>,
    flights: Vec<Option<Flight>>,
    queue: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    busy_until: u64,
    seconds: Vec<Second>,
}

impl Sim<'_> {
    fn at(&mut self, t: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq, event)));
    }

    fn second(&mut self, t: u64) -> &mut Second {
        let i = usize::try_from(t / NANOS_PER_SEC).unwrap_or(usize::MAX);
        if i >= self.seconds.len() {
            self.seconds.resize(i + 1, Second::default());
        }
        &mut self.seconds[i]
    }

    fn next_arrival(&mut self, client: usize, t: u64) {
        // Exponential gaps: Poisson arrivals at `rate`.
        let u = self.arrivals[client].unit();
        let gap = -(1.0 - u).ln() / self.scenario.rate;
        let next = t + (gap * NANOS_PER_SEC as f64) as u64;
        if next < ns(self.scenario.duration) {
            self.at(next, Event::Arrive(client));
        }
    }

    fn in_outage(&self, t: u64) -> bool {
        let start = ns(self.scenario.outage_at);
        (start..start + ns(self.scenario.outage)).contains(&t)
    }

    fn handle(&mut self, t: u64, event: Event) {
        self.clock.set(t);
        let empty = HeaderMap::new();
        match event {
            Event::Arrive(client) => {
                self.next_arrival(client, t);
                self.second(t).requests += 1;
                match self.policies[client].start(ORIGIN, &Method::GET, &empty) {
                    Ok(call) => {
                        self.flights.push(Some(Flight {
                            call,
                            client,
                            arrived: t,
                        }));
                        self.handle(t, Event::Begin(self.flights.len() - 1));
                    }
                    Err(_) => self.second(t).refused += 1,
                }
            }
            Event::Begin(id) => {
                let Some(flight) = self.flights[id].as_mut() else {
                    return;
                };
                match self.policies[flight.client].before_attempt(&mut flight.call) {
                    Ok(hold) if hold.is_zero() => self.handle(t, Event::Send(id)),
                    Ok(hold) => self.at(t + ns(hold), Event::Send(id)),
                    Err(_) => self.flights[id] = None,
                }
            }
            Event::Send(id) => {
                self.second(t).attempts += 1;
                let latency = ns(self.scenario.latency);
                let arrives = t + latency;
                if self.in_outage(arrives) {
                    return self.at(arrives + latency, Event::Answer(id, Answer::Unavailable));
                }
                let waiting = self.busy_until.saturating_sub(arrives);
                if waiting > ns(self.scenario.queue) {
                    return self.at(arrives + latency, Event::Answer(id, Answer::Unavailable));
                }
                let service = (NANOS_PER_SEC as f64 / self.scenario.capacity) as u64;
                let done = arrives.max(self.busy_until) + service;
                self.busy_until = done;
                let answered = done + latency;
                let timeout = ns(self.scenario.timeout);
                if answered - t > timeout {
                    self.second(done).wasted += 1;
                    self.at(t + timeout, Event::Answer(id, Answer::Timeout));
                } else {
                    self.at(answered, Event::Answer(id, Answer::Ok));
                }
            }
            Event::Answer(id, answer) => {
                let Some(flight) = self.flights[id].as_mut() else {
                    return;
                };
                let attempt = match answer {
                    Answer::Ok => Attempt::Response {
                        status: StatusCode::OK,
                        headers: &empty,
                    },
                    Answer::Unavailable => Attempt::Response {
                        status: StatusCode::SERVICE_UNAVAILABLE,
                        headers: &empty,
                    },
                    Answer::Timeout => Attempt::Timeout,
                };
                match self.policies[flight.client].after_attempt(&mut flight.call, attempt) {
                    Next::Retry(wait) => self.at(t + ns(wait), Event::Begin(id)),
                    Next::Done => {
                        let arrived = flight.arrived;
                        self.flights[id] = None;
                        if answer == Answer::Ok {
                            self.second(t).goodput += 1;
                            self.second(arrived).served += 1;
                        }
                    }
                }
            }
        }
    }
}

/// Runs `scenario` with every client following `strategy`.
///
/// Deterministic: the same scenario (seed included) gives the same run, and every strategy
/// sees the same arrivals.
pub fn run(scenario: &Scenario, strategy: Strategy) -> Run {
    let clock = ManualClock::new(0);
    let clients = scenario.clients as usize;
    let mut sim = Sim {
        scenario,
        clock: clock.clone(),
        policies: (0..clients)
            .map(|c| {
                let seed = scenario.seed.wrapping_mul(1000).wrapping_add(c as u64);
                Policy::new(strategy.settings(scenario, seed), Arc::new(clock.clone()))
            })
            .collect(),
        arrivals: (0..clients)
            .map(|c| SplitMix64::new(scenario.seed ^ (0xA5A5 + c as u64)))
            .collect(),
        flights: Vec::new(),
        queue: BinaryHeap::new(),
        seq: 0,
        busy_until: 0,
        seconds: Vec::new(),
    };
    for client in 0..clients {
        sim.next_arrival(client, 0);
    }
    while let Some(Reverse((t, _, event))) = sim.queue.pop() {
        sim.handle(t, event);
    }
    Run {
        strategy,
        seconds: sim.seconds,
    }
}

/// A run's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// Requests made.
    pub requests: u64,
    /// Attempts sent.
    pub attempts: u64,
    /// Attempts per request over the run.
    pub amplification: f64,
    /// Attempts per request made during the outage.
    pub outage_amplification: f64,
    /// The busiest second's attempts over the requests offered per second.
    pub peak_load: f64,
    /// The share of requests that succeeded.
    pub success: f64,
    /// Whole seconds after the outage until every later second's requests succeed (95% or
    /// more); `None` when that never happens in the run.
    pub recovery: Option<u64>,
}

impl Run {
    /// The run's figures against `scenario`.
    pub fn figures(&self, scenario: &Scenario) -> Figures {
        let s = &self.seconds;
        let requests: u64 = s.iter().map(|x| x.requests).sum();
        let attempts: u64 = s.iter().map(|x| x.attempts).sum();
        let served: u64 = s.iter().map(|x| x.served).sum();
        let from = usize::try_from(scenario.outage_at.as_secs()).unwrap_or(0);
        let to = usize::try_from((scenario.outage_at + scenario.outage).as_secs()).unwrap_or(0);
        let during = s.get(from..to.min(s.len())).unwrap_or(&[]);
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let offered = scenario.rate * f64::from(scenario.clients);
        let end = usize::try_from(scenario.duration.as_secs()).unwrap_or(0);
        let made = s.get(..end.min(s.len())).unwrap_or(&[]);
        let good = |x: &Second| x.requests > 0 && x.served as f64 >= 0.95 * x.requests as f64;
        // The first second after the outage from which every second's requests succeed.
        let mut recovery = None;
        for at in (to..made.len()).rev() {
            if !good(&made[at]) {
                break;
            }
            recovery = Some((at - to) as u64);
        }
        Figures {
            requests,
            attempts,
            amplification: ratio(attempts, requests),
            outage_amplification: ratio(
                during.iter().map(|x| x.attempts).sum(),
                during.iter().map(|x| x.requests).sum(),
            ),
            peak_load: s.iter().map(|x| x.attempts).max().unwrap_or(0) as f64 / offered,
            success: ratio(served, requests),
            recovery,
        }
    }
}
