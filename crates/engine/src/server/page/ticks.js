// msgbench's browser tick client (docs/protocol.md, "The tick stream").
//
// Connects back to the server that served this page, syncs its clock to the server's
// (performance.now() + an offset measured by the best of 30 ping/pong exchanges), subscribes,
// then for every tick: checks its sequence number, spends the simulated cost, does the page work
// (none, a DOM update per tick, or one per animation frame), and records its latency from the
// tick's intended send time. Every latency is recorded (no sampling) into a histogram with
// HdrHistogram's buckets (3 significant digits), sent back once a second on the run's interval
// grid. A cumulative acknowledgement goes out every `ack_ms`.
"use strict";
(() => {
  const query = new URLSearchParams(location.search);
  const name = query.get("client") || "browser";
  const format = query.get("format") || "binary";
  const pageWork = query.get("page") || "none";
  const costMs = Number(query.get("cost_ns") || 0) / 1e6;
  const ackNs = Math.max(1, Number(query.get("ack_ms") || 1)) * 1e6;
  const SYNC_ROUNDS = 30;
  const el = (id) => document.getElementById(id);
  const state = (text) => { el("state").textContent = text; };

  // Page clock → server clock (CLOCK_MONOTONIC ns).
  let offsetNs = 0;
  const nowNs = () => performance.now() * 1e6 + offsetNs;

  // HdrHistogram's bucket floor for 3 significant digits: exact below 2048 ns, then 1024..2047
  // sub-buckets per power of two. The server converts these values without loss.
  function bucketFloor(v) {
    v = Math.max(0, Math.floor(v));
    if (v < 2048) return v;
    let shift = Math.floor(Math.log2(v)) - 10;
    while (v / 2 ** shift >= 2048) shift++;
    while (shift > 0 && v / 2 ** shift < 1024) shift--;
    const unit = 2 ** shift;
    return Math.floor(v / unit) * unit;
  }
  const record = (map, v) => {
    const b = bucketFloor(v);
    map.set(b, (map.get(b) || 0) + 1);
  };
  const pairs = (map) => {
    const out = [];
    for (const [v, c] of map) out.push(v, c);
    map.clear();
    return out;
  };

  // Sequence checking, as msgbench's native client does it: missing numbers are remembered as
  // [start, end) ranges (256 at most), so a late number that fills one is "reordered" and any
  // other number at or below the last one seen is a duplicate.
  let expected = -1;
  const missing = [];
  const sequence = [0, 0, 0]; // gaps, duplicates, reordered
  function checkSeq(seq) {
    if (expected < 0 || seq === expected) { expected = seq + 1; return; }
    if (seq > expected) {
      sequence[0] += seq - expected;
      if (missing.length === 256) missing.shift();
      missing.push([expected, seq]);
      expected = seq + 1;
      return;
    }
    const i = missing.findIndex(([start, end]) => start <= seq && seq < end);
    if (i < 0) { sequence[1]++; return; }
    sequence[0]--; sequence[2]++;
    const [start, end] = missing[i];
    const parts = [];
    if (start < seq) parts.push([start, seq]);
    if (seq + 1 < end) parts.push([seq + 1, end]);
    missing.splice(i, 1, ...parts);
  }

  let ws;
  let win = null; // measured window {start, end}, server ns
  let processed = 0, lastAckedCount = -1, lastAckNs = 0;
  let k = 0, delivered = 0;
  const latency = new Map(), service = new Map();
  let latestPrice = null, finished = false;
  const priceEl = el("price");

  const send = (msg) => { if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg)); };
  function ack() {
    if (processed !== lastAckedCount) {
      lastAckedCount = processed;
      send({ type: "ack", processed });
    }
    lastAckNs = nowNs();
  }
  function report(last) {
    send({ type: "report", k, last, delivered, latency: pairs(latency), service: pairs(service),
           sequence: sequence.slice(), processed });
    delivered = 0;
  }
  // Closes the intervals before second `upTo` (those may be empty).
  function rollTo(upTo) {
    while (k < upTo) { report(false); k++; }
  }

  function onTick(seq, intendedNs, sentNs, price) {
    checkSeq(seq);
    if (costMs > 0) {
      const until = performance.now() + costMs;
      while (performance.now() < until) { /* the simulated per-message cost */ }
    }
    if (pageWork === "dom") priceEl.textContent = price.toFixed(2);
    else if (pageWork === "frame") latestPrice = price;
    processed++;
    const done = nowNs();
    if (win && intendedNs >= win.start && intendedNs < win.end) {
      rollTo(Math.floor((done - win.start) / 1e9));
      delivered++;
      record(latency, done - intendedNs);
      if (sentNs > 0) record(service, done - sentNs);
    }
    if (done - lastAckNs >= ackNs) ack();
  }

  function onControl(msg) {
    if (msg.type === "window") {
      win = { start: msg.start_ns, end: msg.end_ns };
      state("streaming");
    } else if (msg.type === "end") {
      finished = true;
      ack();
      if (win) rollTo(Math.floor((nowNs() - win.start) / 1e9));
      report(true);
      state(`done: ${processed} ticks processed`);
      setTimeout(() => ws.close(1000, "done"), 200);
    }
  }

  function onMessage(ev) {
    const data = ev.data;
    if (typeof data === "string") {
      if (data.startsWith('{"type"')) return onControl(JSON.parse(data));
      const t = JSON.parse(data);
      return onTick(t.seq, t.ts, t.sent || 0, t.px);
    }
    const v = new DataView(data);
    if (v.byteLength !== 36) return;
    const u64 = (at) => v.getUint32(at, true) + v.getUint32(at + 4, true) * 4294967296;
    onTick(u64(0), u64(8), u64(16), v.getFloat64(28, true));
  }

  // Smallest step of performance.now(), ns (5 µs in a cross-origin isolated page).
  function clockResolutionNs() {
    let best = Infinity;
    for (let i = 0; i < 20; i++) {
      const a = performance.now();
      let b = performance.now();
      while (b === a) b = performance.now();
      best = Math.min(best, b - a);
    }
    return best * 1e6;
  }

  function sync() {
    return new Promise((resolve) => {
      let rounds = 0, bestRtt = Infinity;
      ws.onmessage = (ev) => {
        const msg = JSON.parse(ev.data);
        if (msg.type === "window") return onControl(msg); // a server that streams at once
        if (msg.type !== "pong") return;
        const back = performance.now();
        const rtt = back - msg.t;
        if (rtt < bestRtt) {
          bestRtt = rtt;
          offsetNs = msg.now_ns - ((msg.t + back) / 2) * 1e6;
        }
        if (++rounds < SYNC_ROUNDS) send({ type: "ping", t: performance.now() });
        else resolve(bestRtt * 1e6);
      };
      send({ type: "ping", t: performance.now() });
    });
  }

  function frame() {
    if (latestPrice !== null) { priceEl.textContent = latestPrice.toFixed(2); latestPrice = null; }
    if (!finished) requestAnimationFrame(frame);
  }

  const wsUrl = `ws://${location.host}/ticks?client=${encodeURIComponent(name)}` +
    `&format=${encodeURIComponent(format)}&wait=1`;
  ws = new WebSocket(wsUrl);
  ws.binaryType = "arraybuffer";
  ws.onopen = async () => {
    state("syncing clock");
    const resolutionNs = clockResolutionNs();
    const rttNs = await sync();
    el("clock").textContent = `resolution ${resolutionNs.toFixed(0)} ns, sync rtt ${rttNs.toFixed(0)} ns`;
    send({ type: "clock", resolution_ns: resolutionNs, rtt_ns: rttNs });
    ws.onmessage = onMessage;
    send({ type: "subscribe" });
    state("subscribed");
    setInterval(() => {
      if (!finished) ack();
      el("processed").textContent = String(processed);
    }, Math.max(1, ackNs / 1e6));
    if (pageWork === "frame") requestAnimationFrame(frame);
  };
  ws.onclose = (ev) => { if (!finished) state(`closed by the server (${ev.code} ${ev.reason})`); };
  ws.onerror = () => state("socket error");
})();
