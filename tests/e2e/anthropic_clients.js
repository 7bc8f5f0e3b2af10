// The anthropic TypeScript SDK and the AI SDK's @ai-sdk/anthropic provider against a tokenrelay server
// (issue 30 §2), run by tests/test_messages_clients.py:
//   node tests/e2e/anthropic_clients.js SERVER_URL MODEL API_KEY
// The SDK streams a reply (text events, then finalMessage) and makes a tool call (tool_choice any); the AI
// SDK's streamText runs a tool loop: the first step must call the tool (toolChoice "required", which the
// embedded engine enforces), the tool runs here, its result goes back, the next step may answer. Prints what
// happened as one JSON object on stdout.

import Anthropic from '@anthropic-ai/sdk';
import { createAnthropic } from '@ai-sdk/anthropic';
import { jsonSchema, stepCountIs, streamText, tool } from 'ai';

const [url, model, apiKey] = process.argv.slice(2);
const schema = {
  type: 'object',
  properties: { city: { type: 'string' } },
  required: ['city'],
  additionalProperties: false,
};

const client = new Anthropic({ baseURL: url, apiKey, maxRetries: 0 });
let streamed = '';
let deltas = 0;
const stream = client.messages
  .stream({
    model,
    max_tokens: 24,
    temperature: 0,
    messages: [{ role: 'user', content: 'Say hello in French.' }],
  })
  .on('text', (text) => {
    streamed += text;
    deltas += 1;
  });
const message = await stream.finalMessage();
const final = message.content.map((b) => (b.type === 'text' ? b.text : '')).join('');

const called = await client.messages.create({
  model,
  max_tokens: 128,
  temperature: 0,
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
  tools: [{ name: 'get_weather', description: 'The current weather in a city.', input_schema: schema }],
  tool_choice: { type: 'any', disable_parallel_tool_use: true },
});
const use = called.content.find((b) => b.type === 'tool_use');

const provider = createAnthropic({ baseURL: url + '/v1', apiKey });
const result = streamText({
  model: provider(model),
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
  tools: {
    get_weather: tool({
      description: 'The current weather in a city.',
      inputSchema: jsonSchema(schema),
      execute: async ({ city }) => `22 °C and sunny in ${city}`,
    }),
  },
  stopWhen: stepCountIs(3),
  prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? 'required' : 'auto' }),
  temperature: 0,
  maxOutputTokens: 64,
  providerOptions: { anthropic: { disableParallelToolUse: true } },
});
let text = '';
for await (const part of result.fullStream) {
  if (part.type === 'text-delta') text += part.text;
  else if (part.type === 'error') throw part.error;
}
const steps = (await result.steps).map((step) => ({
  finishReason: step.finishReason,
  text: step.text,
  toolCalls: step.toolCalls.map((c) => ({ toolName: c.toolName, input: c.input })),
  toolResults: step.toolResults.map((r) => ({ toolName: r.toolName, output: r.output })),
}));

process.stdout.write(
  JSON.stringify({
    sdk: {
      streamed,
      final,
      deltas,
      stopReason: message.stop_reason,
      toolStop: called.stop_reason,
      toolName: use?.name,
    },
    ai: { steps, text },
  }) + '\n',
);
