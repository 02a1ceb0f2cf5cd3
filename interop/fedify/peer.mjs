// An independent ActivityPub peer built on Fedify, for courier's
// interoperability test (interop/fedify_test.go).
//
// It serves one actor, "peer", on http://127.0.0.1:<port> (port 0 by default:
// the kernel picks one). Everything it receives goes through Fedify: inbox
// listeners fire only for activities whose signatures Fedify verified. On top
// of that, every inbound inbox POST is checked once more with Fedify's own
// verifyRequest, to report which key signed it. Like most Fedify
// applications, it accepts every Follow of its actor at once.
//
// The driving test talks to it in two ways:
//
//   - stdout carries one JSON object per line: {"event":"ready","origin":...}
//     once listening, {"event":"delivery",...} for each inbox POST (the
//     signature's key id, whether it verified, Fedify's answer) and
//     {"event":"received",...} for each activity an inbox listener took, and
//     {"event":"sent",...} for each Accept it sent on its own. A delivery
//     also reports the body's SHA-256 and Fedify's check of the Object
//     Integrity Proofs it carries (verifyObject, verifyProof).
//   - POST /_control/{lookup,collection,nodeinfo,rotate,rename,follow,create,
//     tamper,quote,post,update,delete,vote,like,announce,undo}
//     with "Authorization: Bearer $PEER_CONTROL_TOKEN" and a JSON body makes
//     the peer look up an object or send a signed activity (see controls
//     below); the answer is JSON ({"error":...} on failure, with Fedify's
//     message, which includes the remote status and body).
//
// Fedify's own log goes to stderr. The process exits when stdin closes (its
// parent ended) or on SIGTERM/SIGINT.
//
// Environment: PEER_CONTROL_TOKEN (required), PEER_PORT (default 0),
// PEER_KEYS_FILE (where the actor's keys are kept; default: not kept),
// PEER_LOG_LEVEL (Fedify's log level, default "warning"), and
// NODE_EXTRA_CA_CERTS to trust a test CA for https lookups.

import { AsyncLocalStorage } from "node:async_hooks";
import { createServer } from "node:http";
import { createHash, randomUUID, timingSafeEqual } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import { configure } from "@logtape/logtape";
import {
  createFederation,
  exportJwk,
  generateCryptoKeyPair,
  importJwk,
  MemoryKvStore,
} from "@fedify/fedify";
import * as vocab from "@fedify/fedify/vocab";
import {
  Accept,
  Activity,
  Announce,
  Collection,
  Create,
  Delete,
  Endpoints,
  Follow,
  Hashtag,
  isActor,
  Like,
  Mention,
  Note,
  Person,
  PUBLIC_COLLECTION,
  Reject,
  Tombstone,
  Undo,
  Update,
} from "@fedify/fedify/vocab";
import { autoIdAssigner } from "@fedify/fedify/compat";
import { parseNodeInfo } from "@fedify/fedify/nodeinfo";
import { fetchKey, signRequest, verifyObject, verifyProof, verifyRequest } from "@fedify/fedify/sig";
import { Temporal } from "@js-temporal/polyfill";

// The FEP-044f vocabulary (quote consent), which Fedify has from 2.0 on;
// undefined on 1.x, where the quote control answers 501.
const { QuoteRequest, QuoteAuthorization } = vocab;

// Node 21 and later define navigator, which Fedify 2 reads; Node 20 does
// not. Give it the same value, so that the peer runs on either release.
globalThis.navigator ??= { userAgent: `Node.js/${process.versions.node.split(".")[0]}` };

const IDENTIFIER = "peer";
const MAX_BODY = 1 << 20; // bytes accepted in one request
const CONTROL_PREFIX = "/_control/";

const token = process.env.PEER_CONTROL_TOKEN ?? "";
if (token.length < 16) {
  process.stderr.write("peer: PEER_CONTROL_TOKEN must be set (16 characters or more)\n");
  process.exit(2);
}
const port = Number.parseInt(process.env.PEER_PORT ?? "0", 10);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  process.stderr.write("peer: PEER_PORT must be a port number\n");
  process.exit(2);
}

// Every POST Fedify sends goes through the global fetch: keep what each
// one carried (its bytes, digest header and answer) by the activity id,
// so that a control can say exactly what it sent and send a tampered copy
// of it.
const realFetch = globalThis.fetch;
const outgoing = new Map(); // activity id -> [{inbox, body, digest, status}]
const MAX_OUTGOING = 1000;
globalThis.fetch = async (input, init) => {
  if (!(input instanceof Request) || input.method !== "POST" || init?.body != null) {
    return await realFetch(input, init);
  }
  const body = await input.clone().text();
  const response = await realFetch(input, init);
  let id = null;
  try {
    id = JSON.parse(body)?.id ?? null;
  } catch {
    // not an activity
  }
  if (typeof id === "string") {
    if (!outgoing.has(id) && outgoing.size >= MAX_OUTGOING) outgoing.delete(outgoing.keys().next().value);
    const list = outgoing.get(id) ?? [];
    list.push({ inbox: input.url, body, digest: digestHeader(input.headers), status: response.status });
    outgoing.set(id, list);
  }
  return response;
};

// digestHeader is the body digest header a request carries: RFC 9421's
// Content-Digest or draft-cavage's Digest.
function digestHeader(headers) {
  return headers.get("content-digest") ?? headers.get("digest") ?? null;
}

function sha256(bytes) {
  return createHash("sha256").update(bytes).digest("hex");
}

// sentCopies reports what the peer POSTed for the activity id: the inbox,
// the body's SHA-256 and length, its digest header, the answer's status,
// and the integrity proofs the body carries.
function sentCopies(id) {
  return (outgoing.get(id) ?? []).map((o) => {
    let proofs = [];
    try {
      const p = JSON.parse(o.body).proof;
      proofs = (Array.isArray(p) ? p : p == null ? [] : [p]).map((x) => ({
        type: x?.type ?? null,
        cryptosuite: x?.cryptosuite ?? null,
        verificationMethod: x?.verificationMethod ?? null,
      }));
    } catch {
      // reported without proofs
    }
    return { inbox: o.inbox, sha256: sha256(o.body), length: Buffer.byteLength(o.body), digest: o.digest, status: o.status, proofs };
  });
}

// emit writes one event line to stdout.
function emit(event) {
  process.stdout.write(JSON.stringify(event) + "\n");
}

// Fedify logs through LogTape; its records go to stderr, one line each.
await configure({
  contextLocalStorage: new AsyncLocalStorage(),
  sinks: {
    stderr(record) {
      const msg = record.message
        .map((part, i) => (i % 2 === 0 ? part : render(part)))
        .join("");
      process.stderr.write(
        `${new Date(record.timestamp).toISOString()} ${record.level} ` +
          `${record.category.join(".")}: ${msg.slice(0, 4000)}\n`,
      );
    },
  },
  loggers: [
    { category: "fedify", sinks: ["stderr"], lowestLevel: process.env.PEER_LOG_LEVEL ?? "warning" },
    { category: ["logtape", "meta"], sinks: ["stderr"], lowestLevel: "warning" },
  ],
});

function render(v) {
  if (typeof v === "string") return v;
  if (v instanceof Error) return `${v.name}: ${v.message}`;
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}

// The actor's keys: RSA for HTTP Signatures (and Linked Data Signatures),
// Ed25519 for Object Integrity Proofs, as Fedify's own tutorial sets up.
// The rotate control replaces them, as a server that rotates its keys does.
// With PEER_KEYS_FILE they are kept in that file (JWK), so that a restarted
// peer is the same actor with the same keys.
const keysFile = process.env.PEER_KEYS_FILE ?? "";

async function generateKeyPairs() {
  const pairs = [await generateCryptoKeyPair("RSASSA-PKCS1-v1_5"), await generateCryptoKeyPair("Ed25519")];
  if (keysFile !== "") {
    const jwks = [];
    for (const pair of pairs) {
      jwks.push({ privateKey: await exportJwk(pair.privateKey), publicKey: await exportJwk(pair.publicKey) });
    }
    await writeFile(keysFile, JSON.stringify(jwks), { mode: 0o600 });
  }
  return pairs;
}

async function loadKeyPairs() {
  if (keysFile === "") return await generateKeyPairs();
  let jwks;
  try {
    jwks = JSON.parse(await readFile(keysFile, "utf8"));
  } catch (e) {
    if (e.code === "ENOENT") return await generateKeyPairs();
    throw e;
  }
  const pairs = [];
  for (const jwk of jwks) {
    pairs.push({
      privateKey: await importJwk(jwk.privateKey, "private"),
      publicKey: await importJwk(jwk.publicKey, "public"),
    });
  }
  return pairs;
}

let keyPairs = await loadKeyPairs();

// fingerprint is the SHA-256 of the RSA public key's SPKI form, hex.
async function fingerprint(pairs) {
  const spki = await crypto.subtle.exportKey("spki", pairs[0].publicKey);
  return Buffer.from(await crypto.subtle.digest("SHA-256", spki)).toString("hex");
}

// Notes the peer's actor wrote, by their local id, served at /notes/{id}.
const notes = new Map();

const server = createServer();
await new Promise((resolve, reject) => {
  server.once("error", reject);
  server.listen(port, "127.0.0.1", resolve);
});
const origin = `http://127.0.0.1:${server.address().port}`;

const federation = createFederation({
  kv: new MemoryKvStore(),
  origin,
  // Loopback peers only: this process never runs anywhere else.
  allowPrivateAddress: true,
});

// The actor's display name; the rename control changes it.
let displayName = "Fedify peer";

// actorDocument is the peer's actor as it serves it.
async function actorDocument(ctx) {
  const keys = await ctx.getActorKeyPairs(IDENTIFIER);
  return new Person({
    id: ctx.getActorUri(IDENTIFIER),
    preferredUsername: IDENTIFIER,
    name: displayName,
    summary: "An independent ActivityPub implementation courier is tested against.",
    url: ctx.getActorUri(IDENTIFIER),
    inbox: ctx.getInboxUri(IDENTIFIER),
    endpoints: new Endpoints({ sharedInbox: ctx.getInboxUri() }),
    followers: ctx.getFollowersUri(IDENTIFIER),
    publicKey: keys[0].cryptographicKey,
    assertionMethods: keys.map((k) => k.multikey),
  });
}

federation
  .setActorDispatcher("/users/{identifier}", (ctx, identifier) =>
    identifier === IDENTIFIER ? actorDocument(ctx) : null
  )
  .mapHandle((_ctx, username) => (username === IDENTIFIER ? IDENTIFIER : null))
  .setKeyPairsDispatcher((_ctx, identifier) => (identifier === IDENTIFIER ? keyPairs : []));

// Actors following the peer's actor, by id.
const followers = new Map();

federation.setFollowersDispatcher("/users/{identifier}/followers", (_ctx, identifier) =>
  identifier === IDENTIFIER ? { items: [...followers.values()] } : null,
);

federation.setObjectDispatcher(Note, "/notes/{id}", (_ctx, values) => notes.get(values.id) ?? null);

// Follows the peer's actor sent, by their local id, served at /follows/{id}:
// a server that answers an Accept embedding one from another origin (Fedify
// 2 does not trust such an embedded object) fetches it from there.
const follows = new Map();

federation.setObjectDispatcher(Follow, "/follows/{id}", (_ctx, values) => follows.get(values.id) ?? null);

// QuoteRequests the peer's actor sent, served at /quote_requests/{id} for
// the same reason (Fedify 2.x only).
const quoteRequests = new Map();

if (QuoteRequest != null) {
  federation.setObjectDispatcher(QuoteRequest, "/quote_requests/{id}", (_ctx, values) => quoteRequests.get(values.id) ?? null);
}

// describe reduces an object to what the test checks.
function describe(obj) {
  if (obj == null) return null;
  const out = { id: obj.id?.href ?? null, type: typeName(obj) };
  if ("content" in obj && obj.content != null) out.content = String(obj.content);
  if ("attributionId" in obj) out.attributedTo = obj.attributionId?.href ?? null;
  if ("replyTargetId" in obj && obj.replyTargetId != null) out.inReplyTo = obj.replyTargetId.href;
  if ("toIds" in obj) out.to = obj.toIds.map((u) => u.href);
  if ("ccIds" in obj) out.cc = obj.ccIds.map((u) => u.href);
  if ("actorId" in obj) out.actor = obj.actorId?.href ?? null;
  if ("objectId" in obj) out.object = obj.objectId?.href ?? null;
  if ("interactingObjectId" in obj) out.interactingObject = obj.interactingObjectId?.href ?? null;
  if ("interactionTargetId" in obj) out.interactionTarget = obj.interactionTargetId?.href ?? null;
  if ("published" in obj && obj.published != null) out.published = obj.published.toString();
  if ("updated" in obj && obj.updated != null) out.updated = obj.updated.toString();
  return out;
}

function typeName(obj) {
  const t = obj.constructor?.typeId?.href ?? "";
  return t.replace("https://www.w3.org/ns/activitystreams#", "").replace("https://w3id.org/fep/044f#", "");
}

// text renders a plain or language-tagged string, or null.
function text(v) {
  return v == null ? null : String(v);
}

// href renders a URL or a Link's href, or null.
function href(v) {
  if (v == null) return null;
  if (v instanceof URL) return v.href;
  return v.href?.href ?? null;
}

// details adds to a described object what Fedify's vocabulary reads of its
// name, tags (Mention, Hashtag), attachments, quote and poll, for the
// test to check that courier's objects are read whole.
async function details(ctx, obj, out) {
  const options = { documentLoader: ctx.documentLoader, suppressError: true };
  if ("name" in obj && obj.name != null) out.name = text(obj.name);
  if (typeof obj.getTags === "function") {
    out.tags = [];
    for await (const tag of obj.getTags(options)) {
      out.tags.push({
        type: tag instanceof Mention ? "Mention" : tag instanceof Hashtag ? "Hashtag" : typeName(tag),
        name: text(tag.name),
        href: href(tag.href),
      });
    }
  }
  if (typeof obj.getAttachments === "function") {
    out.attachments = [];
    for await (const a of obj.getAttachments(options)) {
      out.attachments.push({
        type: typeName(a),
        url: href(a.url),
        mediaType: a.mediaType ?? null,
        name: text(a.name),
        width: a.width ?? null,
        height: a.height ?? null,
      });
    }
  }
  if ("quoteUrl" in obj && obj.quoteUrl != null) out.quoteUrl = obj.quoteUrl.href;
  if ("quoteId" in obj && obj.quoteId != null) out.quote = obj.quoteId.href;
  if (typeof obj.getExclusiveOptions === "function") {
    out.oneOf = [];
    out.anyOf = [];
    for (const [key, it] of [["oneOf", obj.getExclusiveOptions(options)], ["anyOf", obj.getInclusiveOptions(options)]]) {
      for await (const o of it) {
        const replies = await o.getReplies(options);
        out[key].push({ name: text(o.name), votes: replies?.totalItems ?? null });
      }
    }
    out.votersCount = obj.voters ?? null;
    if (obj.endTime != null) out.endTime = obj.endTime.toString();
  }
  return out;
}

// received reports an activity an inbox listener took, with its object as
// Fedify resolved it (embedded, or fetched when given by id).
async function received(ctx, activity) {
  let object = null;
  let objectError;
  if (activity.objectId != null) {
    try {
      const obj = await activity.getObject({ documentLoader: ctx.documentLoader });
      object = describe(obj);
      if (obj != null) await details(ctx, obj, object);
    } catch (e) {
      objectError = String(e);
    }
  }
  emit({
    event: "received",
    recipient: ctx.recipient,
    type: typeName(activity),
    id: activity.id?.href ?? null,
    actor: activity.actorId?.href ?? null,
    to: activity.toIds.map((u) => u.href),
    cc: activity.ccIds.map((u) => u.href),
    objectId: activity.objectId?.href ?? null,
    result: activity.resultId?.href ?? null,
    object,
    ...(objectError ? { objectError } : {}),
  });
}

federation
  .setInboxListeners("/users/{identifier}/inbox", "/inbox")
  .on(Accept, received)
  .on(Reject, received)
  .on(Create, received)
  .on(Update, received)
  .on(Delete, received)
  .on(Follow, async (ctx, follow) => {
    await received(ctx, follow);
    await acceptFollow(ctx, follow);
  })
  .on(Like, received)
  .on(Announce, received)
  .on(Undo, received)
  .onError((_ctx, error) => emit({ event: "inbox_error", error: String(error) }));

// acceptFollow accepts a Follow of the peer's actor at once, as most
// Fedify applications do, and lists the follower in its followers.
async function acceptFollow(ctx, follow) {
  if (follow.objectId?.href !== ctx.getActorUri(IDENTIFIER).href || follow.actorId == null) return;
  const follower = await follow.getActor();
  if (!isActor(follower)) return;
  followers.set(follower.id.href, follower);
  const accept = withId(ctx, new Accept({
    actor: ctx.getActorUri(IDENTIFIER),
    object: follow,
    to: follower.id,
  }));
  await ctx.sendActivity({ identifier: IDENTIFIER }, follower, accept);
  emit({ event: "sent", type: "Accept", id: accept.id.href, object: follow.id?.href ?? null });
}

const personalInbox = `/users/${IDENTIFIER}/inbox`;

// isInbox reports whether path is an inbox, whose POSTs are reported as
// deliveries.
function isInbox(path) {
  return path === "/inbox" || path === personalInbox;
}

// --- Control endpoint -------------------------------------------------------

function json(status, value) {
  return new Response(JSON.stringify(value), {
    status,
    headers: { "Content-Type": "application/json" },
  });
}

function authorized(request) {
  const got = Buffer.from(request.headers.get("authorization") ?? "");
  const want = Buffer.from(`Bearer ${token}`);
  return got.length === want.length && timingSafeEqual(got, want);
}

// fetchJson GETs url as JSON, with a bounded wait.
async function fetchJson(url) {
  const response = await fetch(url, {
    headers: { Accept: "application/json" },
    signal: AbortSignal.timeout(10_000),
  });
  if (!response.ok) throw new Error(`GET ${url}: ${response.status}`);
  return await response.json();
}

async function lookupActor(ctx, target) {
  const obj = await ctx.lookupObject(target);
  if (obj == null) throw new Error(`lookup of ${target} found nothing`);
  if (!isActor(obj)) throw new Error(`${target} is a ${typeName(obj)}, not an actor`);
  return obj;
}

// now is the current time truncated to unit (never rounded up: an edit's
// "updated" must not precede the "published" of the note it edits).
function now(unit = "second") {
  return Temporal.Now.instant().round({ smallestUnit: unit, roundingMode: "trunc" });
}

// sent keeps the activities the peer's actor sent, by id, so that an Undo
// can embed the activity it undoes.
const sent = new Map();

// withId gives an activity the id Fedify itself would assign to one sent
// without an id (its autoIdAssigner), which is what most applications built
// on Fedify send; the id is needed to report and undo it.
function withId(ctx, activity) {
  return autoIdAssigner(activity, ctx);
}

// send sends activity as the peer's actor to target (an actor, or
// "followers" for Fedify's fan-out) and keeps it for Undos.
async function send(ctx, target, activity, options) {
  await ctx.sendActivity({ identifier: IDENTIFIER }, target, activity, options);
  sent.set(activity.id.href, activity);
  return activity;
}

// mention tags the actor target: its id, named @user@host.
function mention(target) {
  return new Mention({ href: target.id, name: `@${target.preferredUsername}@${target.id.host}` });
}

function ownNote(req) {
  const local = new URL(req.object).pathname.replace(/^\/notes\//, "");
  const note = notes.get(local);
  if (note == null) throw new Error(`${req.object} is not a note of the peer's actor`);
  return { local, note };
}

// undoable are the activity types an Undo may rebuild.
const undoable = { Follow, Like, Announce };

const controls = {
  // lookup {target, signed?}: an object URL or an actor handle, resolved as
  // Fedify does; signed makes the fetches signed GETs (as servers in
  // authorized-fetch mode make them).
  async lookup(ctx, req) {
    const options = req.signed
      ? { documentLoader: await ctx.getDocumentLoader({ identifier: IDENTIFIER }) }
      : {};
    const obj = await ctx.lookupObject(req.target, options);
    if (obj == null) return json(404, { error: `lookup of ${req.target} found nothing` });
    const key = isActor(obj) ? await obj.getPublicKey() : null;
    return json(200, {
      ...describe(obj),
      preferredUsername: isActor(obj) ? (obj.preferredUsername?.toString() ?? null) : null,
      name: isActor(obj) ? (obj.name?.toString() ?? null) : null,
      inbox: isActor(obj) ? (obj.inboxId?.href ?? null) : null,
      sharedInbox: isActor(obj) ? (obj.endpoints?.sharedInbox?.href ?? null) : null,
      publicKey: key == null ? null : { id: key.id?.href ?? null, owner: key.ownerId?.href ?? null },
    });
  },

  // collection {target}: a collection looked up and traversed page by page
  // as Fedify does (at most 100 items).
  async collection(ctx, req) {
    const obj = await ctx.lookupObject(req.target);
    if (obj == null) return json(404, { error: `lookup of ${req.target} found nothing` });
    if (!(obj instanceof Collection)) {
      return json(422, { error: `${req.target} is a ${typeName(obj)}, not a collection` });
    }
    const items = [];
    for await (const item of ctx.traverseCollection(obj)) {
      items.push(item.id?.href ?? item.href?.href ?? null);
      if (items.length >= 100) break;
    }
    return json(200, { id: obj.id?.href ?? null, type: typeName(obj), totalItems: obj.totalItems ?? null, items });
  },

  // nodeinfo {target}: the NodeInfo of the server at target, found through
  // its /.well-known/nodeinfo links and parsed strictly by Fedify. (Fedify
  // 2's getNodeInfo, which does both, refuses loopback addresses.)
  async nodeinfo(_ctx, req) {
    const links = await fetchJson(new URL("/.well-known/nodeinfo", req.target));
    const link = (links?.links ?? []).find((l) =>
      /^http:\/\/nodeinfo\.diaspora\.software\/ns\/schema\/2\.[01]$/.test(l?.rel ?? "")
    );
    if (link?.href == null) return json(404, { error: `no NodeInfo 2.0 or 2.1 link at ${req.target}` });
    const info = parseNodeInfo(await fetchJson(new URL(link.href, req.target)), { parse: "strict" });
    if (info == null) return json(422, { error: `the NodeInfo at ${link.href} is not valid` });
    return json(200, {
      software: { name: info.software.name, version: info.software.version.toString() },
      protocols: info.protocols,
      openRegistrations: info.openRegistrations,
      usage: { users: info.usage.users, localPosts: info.usage.localPosts },
    });
  },

  // rotate {}: new key pairs under the same key ids; the actor document
  // serves the new public keys from now on.
  async rotate() {
    const before = await fingerprint(keyPairs);
    keyPairs = await generateKeyPairs();
    return json(200, { before, after: await fingerprint(keyPairs) });
  },

  // rename {target, name}: a new display name, announced with an Update of
  // the actor (embedded), sent to target's shared inbox.
  async rename(ctx, req) {
    const target = await lookupActor(ctx, req.target);
    displayName = req.name;
    const update = withId(ctx, new Update({
      actor: ctx.getActorUri(IDENTIFIER),
      object: await actorDocument(ctx),
      to: PUBLIC_COLLECTION,
      ccs: [ctx.getFollowersUri(IDENTIFIER)],
    }));
    await send(ctx, target, update, { preferSharedInbox: true });
    return json(200, { id: update.id.href });
  },

  // follow {target}: the peer's actor follows the actor target.
  async follow(ctx, req) {
    const target = await lookupActor(ctx, req.target);
    const actor = ctx.getActorUri(IDENTIFIER);
    const local = randomUUID();
    const follow = new Follow({
      id: ctx.getObjectUri(Follow, { id: local }),
      actor,
      object: target.id,
      to: target.id,
    });
    follows.set(local, follow);
    await send(ctx, target, follow);
    return json(200, { id: follow.id.href });
  },

  // create {target, content, inReplyTo?}: a public note mentioning target
  // (a reply when inReplyTo is given), sent to its personal inbox.
  async create(ctx, req) {
    const target = await lookupActor(ctx, req.target);
    const actor = ctx.getActorUri(IDENTIFIER);
    const local = randomUUID();
    const published = now();
    const note = new Note({
      id: ctx.getObjectUri(Note, { id: local }),
      attribution: actor,
      content: req.content,
      to: PUBLIC_COLLECTION,
      ccs: [ctx.getFollowersUri(IDENTIFIER), target.id],
      tags: [mention(target)],
      replyTarget: req.inReplyTo ? new URL(req.inReplyTo) : null,
      published,
    });
    notes.set(local, note);
    const create = new Create({
      id: new URL("#activity", note.id),
      actor,
      object: note,
      to: PUBLIC_COLLECTION,
      ccs: [ctx.getFollowersUri(IDENTIFIER), target.id],
      published,
    });
    await send(ctx, target, create);
    return json(200, { id: create.id.href, object: note.id.href, sent: sentCopies(create.id.href) });
  },

  // tamper {id, content}: a copy of the activity id the peer sent, exactly
  // as Fedify sent it (with its Object Integrity Proof) but for its
  // object's content, replaced with content; POSTed to the inbox the
  // original went to with a valid HTTP signature (RFC 9421 where Fedify
  // has it) of the peer's actor's RSA key, so that only the proof fails.
  // The answer is the inbox's status and body and the digest header sent.
  async tamper(ctx, req) {
    const original = (outgoing.get(req.id) ?? []).at(-1);
    if (original == null) throw new Error(`${req.id} is not an activity the peer sent`);
    const doc = JSON.parse(original.body);
    if (doc.proof == null) throw new Error(`${req.id} was sent without an integrity proof`);
    if (typeof doc.object !== "object" || doc.object == null) throw new Error(`${req.id} does not embed its object`);
    doc.object.content = req.content;
    const pairs = await ctx.getActorKeyPairs(IDENTIFIER);
    const rsa = pairs.find((k) => k.privateKey.algorithm.name === "RSASSA-PKCS1-v1_5");
    const body = JSON.stringify(doc);
    const request = await signRequest(
      new Request(original.inbox, {
        method: "POST",
        headers: { "Content-Type": "application/activity+json", Accept: "application/activity+json" },
        body,
      }),
      rsa.privateKey,
      rsa.keyId,
      { spec: "rfc9421" },
    );
    const digest = digestHeader(request.headers);
    const response = await realFetch(request, { signal: AbortSignal.timeout(10_000) });
    return json(200, { status: response.status, body: (await response.text()).slice(0, 2000), digest });
  },

  // quote {target, object, content}: a note of the peer's actor quoting
  // object (a note of target's), and a QuoteRequest (FEP-044f) for it sent
  // to target, its instrument the quote, embedded.
  async quote(ctx, req) {
    if (QuoteRequest == null) return json(501, { error: "this Fedify has no QuoteRequest" });
    const target = await lookupActor(ctx, req.target);
    const actor = ctx.getActorUri(IDENTIFIER);
    const local = randomUUID();
    const note = new Note({
      id: ctx.getObjectUri(Note, { id: local }),
      attribution: actor,
      content: req.content,
      quote: new URL(req.object),
      to: PUBLIC_COLLECTION,
      ccs: [ctx.getFollowersUri(IDENTIFIER), target.id],
      published: now(),
    });
    notes.set(local, note);
    const request = new QuoteRequest({
      id: ctx.getObjectUri(QuoteRequest, { id: local }),
      actor,
      object: new URL(req.object),
      instrument: note,
      to: target.id,
    });
    quoteRequests.set(local, request);
    await send(ctx, target, request);
    return json(200, { id: request.id.href, object: note.id.href });
  },

  // post {audience, target, content}: a note that is not public, sent as
  // its audience says: "followers" (to the followers collection only,
  // delivered to every follower through Fedify's fan-out, shared inboxes
  // preferred) or "direct" (to target only, with a mention).
  async post(ctx, req) {
    const actor = ctx.getActorUri(IDENTIFIER);
    const local = randomUUID();
    const published = now();
    let addressing;
    let target = null;
    if (req.audience === "followers") {
      addressing = { to: ctx.getFollowersUri(IDENTIFIER) };
    } else if (req.audience === "direct") {
      target = await lookupActor(ctx, req.target);
      addressing = {
        to: target.id,
        tags: [mention(target)],
      };
    } else {
      return json(400, { error: `audience must be followers or direct, not ${req.audience}` });
    }
    const note = new Note({
      id: ctx.getObjectUri(Note, { id: local }),
      attribution: actor,
      content: req.content,
      published,
      ...addressing,
    });
    notes.set(local, note);
    const create = new Create({
      id: new URL("#activity", note.id),
      actor,
      object: note,
      published,
      to: addressing.to,
    });
    if (target == null) {
      await send(ctx, "followers", create, { preferSharedInbox: true });
    } else {
      await send(ctx, target, create);
    }
    return json(200, { id: create.id.href, object: note.id.href });
  },

  // update {target, object, content}: an edit of the peer's note object,
  // sent to target's shared inbox.
  async update(ctx, req) {
    const target = await lookupActor(ctx, req.target);
    const { local, note } = ownNote(req);
    const updated = note.clone({
      content: req.content,
      updated: now("millisecond"),
    });
    notes.set(local, updated);
    const update = withId(ctx, new Update({
      actor: ctx.getActorUri(IDENTIFIER),
      object: updated,
      to: PUBLIC_COLLECTION,
      ccs: [ctx.getFollowersUri(IDENTIFIER), target.id],
    }));
    await send(ctx, target, update, { preferSharedInbox: true });
    return json(200, { id: update.id.href });
  },

  // delete {target, object}: the deletion of the peer's note object (a
  // Tombstone), sent to target's shared inbox.
  async delete(ctx, req) {
    const target = await lookupActor(ctx, req.target);
    const { local, note } = ownNote(req);
    notes.delete(local);
    const del = withId(ctx, new Delete({
      actor: ctx.getActorUri(IDENTIFIER),
      object: new Tombstone({ id: note.id }),
      to: PUBLIC_COLLECTION,
      ccs: [ctx.getFollowersUri(IDENTIFIER), target.id],
    }));
    await send(ctx, target, del, { preferSharedInbox: true });
    return json(200, { id: del.id.href });
  },

  // vote {target, object, option}: a vote on the poll object (a Question
  // by target): a Create of a Note whose name is the option, replying to
  // the poll, addressed to its author only, as Mastodon and Misskey send
  // votes.
  async vote(ctx, req) {
    const target = await lookupActor(ctx, req.target);
    const actor = ctx.getActorUri(IDENTIFIER);
    const local = randomUUID();
    const note = new Note({
      id: ctx.getObjectUri(Note, { id: local }),
      attribution: actor,
      name: req.option,
      replyTarget: new URL(req.object),
      to: target.id,
    });
    notes.set(local, note);
    const create = new Create({
      id: new URL("#activity", note.id),
      actor,
      object: note,
      to: target.id,
    });
    await send(ctx, target, create);
    return json(200, { id: create.id.href, object: note.id.href });
  },

  // like {target, object}: a Like of object, sent to target (its author).
  async like(ctx, req) {
    const target = await lookupActor(ctx, req.target);
    const like = withId(ctx, new Like({
      actor: ctx.getActorUri(IDENTIFIER),
      object: new URL(req.object),
      to: target.id,
    }));
    await send(ctx, target, like);
    return json(200, { id: like.id.href });
  },

  // announce {target, object}: a public boost of object, sent to target.
  async announce(ctx, req) {
    const target = await lookupActor(ctx, req.target);
    const announce = withId(ctx, new Announce({
      actor: ctx.getActorUri(IDENTIFIER),
      object: new URL(req.object),
      to: PUBLIC_COLLECTION,
      ccs: [ctx.getFollowersUri(IDENTIFIER), target.id],
      published: now(),
    }));
    await send(ctx, target, announce);
    return json(200, { id: announce.id.href });
  },

  // undo {target, id, type?, object?}: an Undo embedding the activity id
  // the peer sent; a peer restarted since rebuilds it from type and object,
  // as an application that keeps its follows and likes in a database does.
  async undo(ctx, req) {
    const target = await lookupActor(ctx, req.target);
    let activity = sent.get(req.id);
    if (activity == null && Object.hasOwn(undoable, req.type ?? "") && req.object) {
      activity = new undoable[req.type]({
        id: new URL(req.id),
        actor: ctx.getActorUri(IDENTIFIER),
        object: new URL(req.object),
        to: target.id,
      });
    }
    if (activity == null) throw new Error(`${req.id} is not an activity the peer sent`);
    const undo = withId(ctx, new Undo({
      actor: ctx.getActorUri(IDENTIFIER),
      object: activity,
      tos: activity.toIds,
      ccs: activity.ccIds,
    }));
    await send(ctx, target, undo);
    return json(200, { id: undo.id.href });
  },
};

async function control(request, name) {
  if (!authorized(request)) return json(401, { error: "bad control token" });
  const fn = Object.hasOwn(controls, name) ? controls[name] : null;
  if (request.method !== "POST" || fn == null) return json(404, { error: `no control ${name}` });
  let req;
  try {
    req = await request.json();
  } catch (e) {
    return json(400, { error: `body is not JSON: ${e}` });
  }
  try {
    return await fn(federation.createContext(new URL(origin), undefined), req);
  } catch (e) {
    return json(502, { error: String(e?.message ?? e) });
  }
}

// --- HTTP -------------------------------------------------------------------

// toRequest turns a Node request into a fetch Request, keeping every header
// as sent (Host included: the signature covers it).
async function toRequest(req) {
  const headers = new Headers();
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
    headers.append(req.rawHeaders[i], req.rawHeaders[i + 1]);
  }
  let body;
  if (req.method !== "GET" && req.method !== "HEAD") {
    const chunks = [];
    let size = 0;
    for await (const chunk of req) {
      size += chunk.length;
      if (size > MAX_BODY) throw Object.assign(new Error("body too large"), { status: 413 });
      chunks.push(chunk);
    }
    body = Buffer.concat(chunks);
  }
  return new Request(new URL(req.url, origin), { method: req.method, headers, body });
}

// checkSignature verifies an inbox POST with Fedify's verifyRequest and
// returns what it found, for the delivery report.
async function checkSignature(request) {
  const ctx = federation.createContext(new URL(origin), undefined);
  const sig = request.headers.get("signature") ?? "";
  const input = request.headers.get("signature-input");
  // RFC 9421 (Signature-Input) or draft-cavage: the key id, the signed
  // components or headers (space-separated), and the algorithm named.
  const scheme = input ? "rfc9421" : "draft-cavage";
  const keyId = (input ? /keyid="([^"]*)"/ : /keyId="([^"]*)"/).exec(input ?? sig)?.[1] ?? null;
  const headers = input
    ? (/\(([^)]*)\)/.exec(input)?.[1]?.replaceAll('"', "") ?? null)
    : (/headers="([^"]*)"/.exec(sig)?.[1] ?? null);
  const algorithm = (input ? /alg="([^"]*)"/ : /algorithm="([^"]*)"/).exec(input ?? sig)?.[1] ?? null;
  let key = null;
  let error;
  try {
    key = await verifyRequest(request.clone(), {
      documentLoader: ctx.documentLoader,
      contextLoader: ctx.contextLoader,
    });
  } catch (e) {
    error = String(e);
  }
  let activity = {};
  let proof = null;
  const body = Buffer.from(await request.clone().arrayBuffer());
  try {
    const doc = JSON.parse(body.toString("utf8"));
    activity = { id: doc.id ?? null, type: doc.type ?? null, actor: doc.actor ?? null };
    if (doc.proof != null) proof = await checkProof(ctx, doc);
  } catch {
    // Fedify answers the malformed body itself.
  }
  return {
    scheme,
    keyId,
    algorithm,
    signedHeaders: headers,
    contentType: request.headers.get("content-type"),
    verified: key != null,
    verifiedKey: key?.id?.href ?? null,
    keyOwner: key?.ownerId?.href ?? null,
    ...(error ? { error } : {}),
    activity,
    bodySha256: sha256(body),
    bodyLength: body.length,
    proof,
  };
}

// checkProof checks the Object Integrity Proofs of an inbound activity
// doc with Fedify's verifyObject (every proof verifies, and they
// authenticate the activity's actor) and reports, for each proof, the key
// verifyProof found it made with, or null.
// As Fedify's inbox does, the proofs are checked on the document without
// its Linked Data Signature (made after the proof, over the proved
// document).
async function checkProof(ctx, signed) {
  const { signature: _, ...doc } = signed;
  const options = { documentLoader: ctx.documentLoader, contextLoader: ctx.contextLoader };
  const out = { verified: false, keys: [] };
  try {
    out.verified = (await verifyObject(Activity, doc, options)) != null;
    const activity = await Activity.fromJsonLd(doc, options);
    for await (const p of activity.getProofs(options)) {
      const key = await verifyProof(doc, p, options);
      // The key as Fedify resolves it, to tell a key it cannot find from a
      // signature that does not match.
      let resolved = null;
      try {
        const fetched = await fetchKey(p.verificationMethodId, vocab.Multikey, options);
        resolved = fetched?.key?.publicKey?.algorithm?.name ?? null;
      } catch (e) {
        resolved = `error: ${e?.message ?? e}`;
      }
      out.keys.push({
        resolved,
        method: p.verificationMethodId?.href ?? null,
        cryptosuite: p.cryptosuite ?? null,
        verified: key != null,
        controller: key?.controllerId?.href ?? null,
      });
    }
  } catch (e) {
    out.error = String(e?.message ?? e);
  }
  return out;
}

async function handle(req, res) {
  let response;
  try {
    const request = await toRequest(req);
    const path = new URL(request.url).pathname;
    if (path.startsWith(CONTROL_PREFIX)) {
      response = await control(request, path.slice(CONTROL_PREFIX.length));
    } else if (request.method === "POST" && isInbox(path)) {
      const check = await checkSignature(request);
      response = await federation.fetch(request, { contextData: undefined });
      emit({ event: "delivery", path, status: response.status, ...check });
    } else {
      response = await federation.fetch(request, { contextData: undefined });
    }
  } catch (e) {
    response = new Response(String(e?.message ?? e), { status: e?.status ?? 500 });
  }
  res.statusCode = response.status;
  response.headers.forEach((value, name) => res.setHeader(name, value));
  res.end(Buffer.from(await response.arrayBuffer()));
}

server.on("request", (req, res) => {
  handle(req, res).catch((e) => {
    process.stderr.write(`peer: request: ${e}\n`);
    if (!res.headersSent) res.statusCode = 500;
    res.end();
  });
});

let closing = false;
function shutdown() {
  if (closing) return;
  closing = true;
  server.close(() => process.exit(0));
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
process.stdin.on("end", shutdown);
process.stdin.on("error", shutdown);
process.stdin.resume();

// The version of Fedify this peer runs, for the test's report.
const fedifyVersion = JSON.parse(
  await readFile(new URL("./node_modules/@fedify/fedify/package.json", import.meta.url), "utf8"),
).version;

emit({
  event: "ready",
  origin,
  actor: new URL(`/users/${IDENTIFIER}`, origin).href,
  software: `@fedify/fedify ${fedifyVersion}`,
  node: process.version,
});
