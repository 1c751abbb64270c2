//! A waiter's turn in an adaptive rule's queue: what a release hands it.

use std::sync::{Mutex, PoisonError};
use std::task::Waker;

use ratewarden_core::adaptive::Ticket;

/// A waiter's turn: set by whoever dispatches it, under the limiters' lock.
#[derive(Debug, Default)]
pub(crate) struct Turn(Mutex<TurnState>);

#[derive(Debug, Default)]
enum TurnState {
    /// In the queue; the waker of the future waiting for it.
    #[default]
    Waiting,
    Parked(Waker),
    /// A place was taken for it.
    Granted(Ticket),
    /// Its ticket was handed over, or it left.
    Over,
}

impl Turn {
    /// Hands the waiter `ticket`; the waker to wake once the limiters' lock is let go.
    pub(crate) fn grant(&self, ticket: Ticket) -> Option<Waker> {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *state, TurnState::Granted(ticket)) {
            TurnState::Parked(waker) => Some(waker),
            _ => None,
        }
    }

    /// Ends the turn: its ticket when it was granted one.
    pub(crate) fn end(&self) -> Option<Ticket> {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *state, TurnState::Over) {
            TurnState::Granted(ticket) => Some(ticket),
            _ => None,
        }
    }

    /// Its ticket once granted; else parks `waker` to be woken by the grant.
    pub(crate) fn poll(&self, waker: &Waker) -> Option<Ticket> {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *state, TurnState::Over) {
            TurnState::Granted(ticket) => Some(ticket),
            TurnState::Over => None,
            TurnState::Waiting | TurnState::Parked(_) => {
                *state = TurnState::Parked(waker.clone());
                None
            }
        }
    }
}
