// The Vercel AI SDK's tool loop against a tokenrelay server (issue 21 §4), run by tests/test_agents.py:
//   node tests/e2e/vercel_tools.js BASE_URL MODEL
// streamText with one tool and stopWhen: the first step must call it (toolChoice "required", which the
// embedded engine enforces; a 135M model would answer instead), the tool runs here, its result goes back,
// and the next step may answer (toolChoice "auto"). Prints what happened as one JSON object on stdout.

import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { jsonSchema, stepCountIs, streamText, tool } from 'ai';

const [baseURL, modelName] = process.argv.slice(2);
const provider = createOpenAICompatible({ name: 'tokenrelay', baseURL, apiKey: 'unused' });

const getWeather = tool({
  description: 'The current weather in a city.',
  inputSchema: jsonSchema({
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  }),
  execute: async ({ city }) => `22 °C and sunny in ${city}`,
});

const result = streamText({
  model: provider.chatModel(modelName),
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
  tools: { get_weather: getWeather },
  stopWhen: stepCountIs(3),
  prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? 'required' : 'auto' }),
  temperature: 0,
  maxOutputTokens: 64,
  // Passed as they are into the request body: one call per step.
  providerOptions: { tokenrelay: { parallel_tool_calls: false } },
});

let deltas = 0;
let text = '';
for await (const part of result.fullStream) {
  if (part.type === 'text-delta') {
    deltas += 1;
    text += part.text;
  } else if (part.type === 'error') {
    throw part.error;
  }
}
const steps = (await result.steps).map((step) => ({
  finishReason: step.finishReason,
  text: step.text,
  toolCalls: step.toolCalls.map((c) => ({ toolName: c.toolName, input: c.input })),
  toolResults: step.toolResults.map((r) => ({ toolName: r.toolName, output: r.output })),
}));
process.stdout.write(JSON.stringify({ steps, deltas, text }) + '\n');
