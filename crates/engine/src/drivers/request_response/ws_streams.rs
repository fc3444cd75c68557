//! `ws-rpc` calls answered by a stream (`[ws_rpc.methods.NAME] stream = true`): the responses
//! carrying a call's id are its messages, each timed as it is read
//! ([`crate::streamed::StreamFigures`]), until the one whose `result` is the method's
//! `stream_done` — then the call is answered, with its figures, as an HTTP/2 streamed response
//! is ([`Event::Stream`]). An `error` response ends the stream failed; a connection lost
//! during it cuts it, with what it had delivered.
//!
//! Bounded: a connection's open streams are its calls in flight (the caller's window).
use super::caller::{Ends, Event};
use crate::net::json_rpc::{error_message, parse_stream_reply};
use crate::streamed::StreamFigures;
use msgbench_model::result::ErrorCount;

/// What a cut stream's failure is counted as.
const CUT: &str = "the connection was lost during a streamed answer";

/// Every connection's streams in flight on one socket thread.
pub struct WsStreams {
    /// Per class: the `result` that ends its stream, as JSON text (`None`: not streamed).
    done: Vec<Option<String>>,
    /// Per connection: its open streams (call id, class, what came).
    open: Vec<Vec<(u64, usize, Box<StreamFigures>)>>,
}

/// What a response was to the streams.
pub enum Read {
    /// Not a response to a streamed call: read it as any other.
    NotAStream,
    /// A message of a stream, or its end: handled.
    Taken,
}

impl WsStreams {
    /// `done`: per class, the end of its stream (`None`: not streamed); `connections` on the
    /// thread.
    pub fn new(done: Vec<Option<String>>, connections: usize) -> WsStreams {
        WsStreams {
            open: (0..if done.iter().any(Option::is_some) {
                connections
            } else {
                0
            })
                .map(|_| Vec::new())
                .collect(),
            done,
        }
    }

    /// Any class streams (else nothing here runs).
    pub fn any(&self) -> bool {
        !self.open.is_empty()
    }

    /// Call `id` of `class` went out on connection `conn`.
    pub fn sent(&mut self, conn: usize, class: usize, id: u64) {
        if self.done[class].is_some() {
            self.open[conn].push((id, class, Box::default()));
        }
    }

    /// A response read on connection `conn` at `now`: a stream's message or end, or not one.
    pub fn read(
        &mut self,
        conn: usize,
        payload: &[u8],
        now: u64,
        (ends, errors, scratch): (&mut Ends, &mut Vec<ErrorCount>, &mut String),
    ) -> Read {
        let Some(open) = self.open.get_mut(conn).filter(|o| !o.is_empty()) else {
            return Read::NotAStream;
        };
        let Some((id, result)) = parse_stream_reply(payload) else {
            return Read::NotAStream;
        };
        let Some(k) = open.iter().position(|(i, ..)| *i == id) else {
            return Read::NotAStream;
        };
        let done = self.done[open[k].1].as_deref().expect("a streamed class");
        let conn = conn as u32;
        match result {
            Some(r) if r != done => {
                open[k].2.message(now, r.len());
                return Read::Taken;
            }
            Some(_) => {
                let (id, _, figures) = open.swap_remove(k);
                ends.push_stream(conn, id, true, figures);
            }
            None => {
                let (id, _, figures) = open.swap_remove(k);
                error_message(payload, scratch);
                ErrorCount::add(errors, scratch, 1);
                match figures.messages {
                    0 => ends.push(Event::Reply {
                        conn,
                        id,
                        ok: false,
                    }),
                    _ => ends.push_stream(conn, id, false, figures),
                }
            }
        }
        Read::Taken
    }

    /// Connection `conn` is lost: its streams that had delivered are cut (counted with what
    /// they had); the others fail with the connection. `reset`: the caller asked for it (a
    /// call timed out): every call on it has already failed, counted as the caller counts.
    pub fn lost(
        &mut self,
        conn: usize,
        reset: bool,
        ends: &mut Ends,
        errors: &mut Vec<ErrorCount>,
    ) {
        let Some(open) = self.open.get_mut(conn) else {
            return;
        };
        for (id, _, figures) in open.drain(..) {
            if figures.messages > 0 && !reset {
                ErrorCount::add(errors, CUT, 1);
                ends.push_stream(conn as u32, id, false, figures);
            }
        }
    }
}
