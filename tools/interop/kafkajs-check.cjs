// The kafkajs side of scripts/interop-check.sh: a stock kafkajs consumer (no codec
// plugins) reads every record of TOPIC from BROKERS and checks that each is a valid
// CloudEvent in Kafka binary content mode, as the CloudEvents JavaScript SDK reads it,
// with the extensions, key, traceparent and signature choreo writes. It exits 0 when
// EXPECT records were read and all passed, 1 otherwise (a batch it cannot decompress
// crashes the consumer, which counts as a failure).
"use strict";
const crypto = require("node:crypto");
const fs = require("node:fs");
const { Kafka, logLevel } = require("kafkajs");
const { Kafka: CEKafka } = require("cloudevents");

const brokers = (process.env.BROKERS || "127.0.0.1:9092").split(",");
const topic = process.env.TOPIC || "interop.events";
const expect = Number(process.env.EXPECT || "0");
const pubKey = process.env.PUBKEY ? crypto.createPublicKey(fs.readFileSync(process.env.PUBKEY)) : null;
const timeoutMs = Number(process.env.TIMEOUT_MS || "60000");

// The headers choreo_signature covers, in order (event/sign.go).
const signed = ["ce_specversion", "ce_id", "ce_type", "ce_source", "ce_subject", "ce_time",
  "ce_correlationid", "ce_causationid", "ce_dataschemaversion", "content-type"];

function uvarint(n) {
  const out = [];
  while (n >= 0x80) { out.push((n & 0x7f) | 0x80); n = Math.floor(n / 128); }
  out.push(n);
  return Buffer.from(out);
}

// lastHeaders turns kafkajs headers (a Buffer, or an array when repeated) into the last
// value of each, as Buffers.
function lastHeaders(raw) {
  const h = {};
  for (const [k, v] of Object.entries(raw || {})) h[k] = Array.isArray(v) ? v[v.length - 1] : v;
  return h;
}

function verifySignature(h, key, value) {
  const [alg, , sig] = (h.choreo_signature || "").toString().split(" ");
  if (alg !== "ed25519" || !sig) throw new Error(`choreo_signature is not "ed25519 <key id> <signature>"`);
  const field = (b) => Buffer.concat([uvarint(b.length), b]);
  const parts = [Buffer.from("choreo-signature-v1"), field(Buffer.from(topic)), field(key), field(value)];
  for (const name of signed) parts.push(h[name] === undefined ? Buffer.from([0]) : Buffer.concat([Buffer.from([1]), field(h[name])]));
  if (!crypto.verify(null, Buffer.concat(parts), pubKey, Buffer.from(sig, "base64url"))) throw new Error("signature does not verify");
}

function check(message) {
  const h = lastHeaders(message.headers);
  const s = Object.fromEntries(Object.entries(h).map(([k, v]) => [k, v.toString("utf8")]));
  if (s["content-type"] !== "application/json") throw new Error(`content-type ${s["content-type"]}: not binary mode JSON`);
  // The CloudEvents SDK's Kafka binding, strict validation.
  const ce = CEKafka.toEvent({ headers: s, key: message.key.toString(), value: message.value.toString(), timestamp: message.timestamp });
  ce.validate();
  if (ce.specversion !== "1.0" || !ce.id || !ce.type || !ce.source || !ce.time) throw new Error("missing required attribute");
  if (ce.subject !== message.key.toString() || ce.partitionkey !== ce.subject) throw new Error(`key ${message.key} is not the subject ${ce.subject}`);
  if (!ce.correlationid || !/^[1-9][0-9]*$/.test(ce.dataschemaversion || "")) throw new Error("missing correlationid or dataschemaversion extension");
  if (ce.type !== "order.created" && !ce.causationid) throw new Error(`${ce.type} without causationid`);
  const data = typeof ce.data === "string" ? JSON.parse(ce.data) : ce.data;
  if (!data || data.order_id !== ce.subject) throw new Error("data is not the event's JSON payload");
  if (!/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/.test(s.traceparent || "")) throw new Error(`traceparent ${s.traceparent}`);
  if (pubKey) verifySignature(h, message.key, message.value);
  return ce;
}

async function main() {
  const kafka = new Kafka({ clientId: "choreo-interop-check", brokers, logLevel: logLevel.ERROR });
  const consumer = kafka.consumer({ groupId: `choreo-interop-check-${process.pid}-${Date.now()}`, retry: { retries: 0 } });
  let ok = 0;
  const bad = [];
  const types = {};
  let finish;
  const done = new Promise((resolve) => { finish = resolve; });
  const timer = setTimeout(() => finish(`timed out after ${timeoutMs} ms`), timeoutMs);
  consumer.on(consumer.events.CRASH, (e) => finish(`consumer crashed: ${e.payload.error.name}: ${e.payload.error.message}`));
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      try {
        const ce = check(message);
        types[ce.type] = (types[ce.type] || 0) + 1;
        ok++;
      } catch (e) {
        bad.push(`${topic}[${partition}]@${message.offset}: ${e.message}`);
      }
      if (ok + bad.length >= expect) finish(null);
    },
  });
  const failure = await done;
  clearTimeout(timer);
  await consumer.disconnect().catch(() => {});
  console.log(`kafkajs 2.2.4: read ${ok + bad.length} of ${expect} records of ${topic}; ${ok} valid CloudEvents (binary mode${pubKey ? ", signature verified" : ""}): ${JSON.stringify(types)}`);
  for (const b of bad.slice(0, 10)) console.log("  invalid:", b);
  if (failure) console.log("kafkajs:", failure);
  process.exit(failure || bad.length || ok !== expect ? 1 : 0);
}

main().catch((e) => { console.error("kafkajs check:", e); process.exit(1); });
