// Writes a real Mastra memory database with Mastra's own code (@mastra/memory over
// @mastra/libsql): one resource with two threads, a tool call and its result, an image, a
// reasoning part, resource working memory, and an observational-memory record for the first
// thread whose cursor stops before its last turn. The second thread has no OM record.
//
// Usage: node make_db.mjs OUT.db [--no-om]
// Prints a JSON summary (ids, timestamps) the Python tests compare the reader's output with.
import { MessageList } from '@mastra/core/agent';
import { LibSQLStore } from '@mastra/libsql';
import { Memory } from '@mastra/memory';

const [out, flag] = process.argv.slice(2);
if (!out) throw new Error('usage: node make_db.mjs OUT.db [--no-om]');
const withOm = flag !== '--no-om';

const RESOURCE = 'user-ada';
const storage = new LibSQLStore({ id: 'obsmem-fixture', url: `file:${out}` });
const memory = new Memory({
  storage,
  options: { workingMemory: { enabled: true, scope: 'resource' } },
});
await storage.init();

const at = (minute) => new Date(Date.UTC(2026, 2, 1, 9, minute, 0));
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

// Mastra's own conversion from AI SDK model messages to its stored (format 2) messages.
function stored(threadId, turns) {
  const list = new MessageList({ threadId, resourceId: RESOURCE });
  for (const [source, message] of turns) list.add(message, source);
  const messages = list.get.all.db();
  messages.forEach((m, i) => { m.createdAt = at(threadId === 'thread-trip' ? i : 30 + i); });
  return messages;
}

const trip = stored('thread-trip', [
  ['input', { role: 'user', content: 'I am planning a trip to Lisbon in May. What is the weather like?' }],
  ['response', {
    role: 'assistant',
    content: [
      { type: 'reasoning', text: 'The user wants May weather for Lisbon; call the weather tool.' },
      { type: 'tool-call', toolCallId: 'call-weather-1', toolName: 'getWeather', input: { city: 'Lisbon', month: 'May' } },
    ],
  }],
  ['response', {
    role: 'tool',
    content: [{ type: 'tool-result', toolCallId: 'call-weather-1', toolName: 'getWeather', output: { type: 'json', value: { highC: 22, lowC: 14, rainDays: 6 } } }],
  }],
  ['response', { role: 'assistant', content: 'Lisbon in May is mild: highs around 22°C, lows near 14°C, about six rainy days.' }],
  ['input', { role: 'user', content: [
    { type: 'text', text: 'Here is the hotel I booked.' },
    { type: 'image', image: PNG, mediaType: 'image/png' },
  ] }],
  ['response', { role: 'assistant', content: 'Nice choice, it is close to the river.' }],
  ['input', { role: 'user', content: 'Can you remind me what I need to pack?' }],
]);
const cooking = stored('thread-cooking', [
  ['input', { role: 'user', content: 'Give me a quick pasta recipe.' }],
  ['response', { role: 'assistant', content: 'Boil spaghetti, toss with garlic, olive oil and chilli.' }],
]);

await memory.saveThread({ thread: {
  id: 'thread-trip', resourceId: RESOURCE, title: 'Lisbon trip',
  metadata: { channel: 'web' }, createdAt: at(0), updatedAt: at(6),
} });
await memory.saveThread({ thread: {
  id: 'thread-cooking', resourceId: RESOURCE, title: 'Pasta',
  metadata: {}, createdAt: at(30), updatedAt: at(31),
} });
await memory.saveMessages({ messages: trip });
await memory.saveMessages({ messages: cooking });
const workingMemory = '# User\n- Name: Ada\n- Home city: Porto';
await memory.updateWorkingMemory({ threadId: 'thread-trip', resourceId: RESOURCE, workingMemory });

const observations = [
  'Date: Mar 1, 2026',
  '* 🔴 (09:00) User is planning a trip to Lisbon in May.',
  '* 🟡 (09:03) Lisbon in May: highs 22°C, lows 14°C, about six rainy days.',
  '* 🔴 (09:04) User booked a hotel close to the river.',
].join('\n');
// The cursor: everything through the assistant's reply about the hotel (Mastra's sync
// observation sets lastObservedAt to the newest observed message's createdAt).
const observedThrough = trip[trip.length - 2];
let record = null;
if (withOm) {
  const store = await storage.getStore('memory');
  record = await store.initializeObservationalMemory({
    threadId: 'thread-trip', resourceId: RESOURCE, scope: 'thread',
    config: { observation: { messageTokens: 30000 }, reflection: { observationTokens: 40000 } },
    observedTimezone: 'UTC',
  });
  await store.updateActiveObservations({
    id: record.id, observations, tokenCount: 60,
    lastObservedAt: observedThrough.createdAt,
    observedMessageIds: trip.slice(0, -1).map((m) => m.id),
  });
}

console.log(JSON.stringify({
  resourceId: RESOURCE,
  workingMemory,
  observations: withOm ? observations : null,
  omRecordId: record?.id ?? null,
  lastObservedAt: withOm ? observedThrough.createdAt.toISOString() : null,
  observedThroughId: withOm ? observedThrough.id : null,
  threads: {
    'thread-trip': trip.map((m) => ({ id: m.id, role: m.role, createdAt: m.createdAt.toISOString() })),
    'thread-cooking': cooking.map((m) => ({ id: m.id, role: m.role, createdAt: m.createdAt.toISOString() })),
  },
}, null, 2));
