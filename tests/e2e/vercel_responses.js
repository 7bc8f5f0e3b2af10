// The Vercel AI SDK's OpenAI provider on the Responses API against a tokenrelay server (issue 29 §2), run by
// tests/test_responses_clients.py:   node tests/e2e/vercel_responses.js BASE_URL MODEL
// streamText with createOpenAI({ baseURL }).responses(model): once without tools, once with a tool whose first
// step must call it (toolChoice "required", which the embedded engine enforces), the tool runs here, its result
// goes back, and the next step may answer. Prints what happened as one JSON object on stdout.

import { createOpenAI } from '@ai-sdk/openai';
import { jsonSchema, stepCountIs, streamText, tool } from 'ai';

const [baseURL, modelName] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey: 'unused' });
const model = openai.responses(modelName);

async function read(result) {
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
  return { deltas, text };
}

const plainResult = streamText({
  model,
  prompt: 'Name a colour.',
  temperature: 0,
  maxOutputTokens: 32,
});
const plain = { ...(await read(plainResult)), finishReason: await plainResult.finishReason };

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
const toolResult = streamText({
  model,
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
  tools: { get_weather: getWeather },
  stopWhen: stepCountIs(3),
  prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? 'required' : 'auto' }),
  temperature: 0,
  maxOutputTokens: 64,
  providerOptions: { openai: { parallelToolCalls: false, store: false } },
});
const streamed = await read(toolResult);
const steps = (await toolResult.steps).map((step) => ({
  finishReason: step.finishReason,
  text: step.text,
  toolCalls: step.toolCalls.map((c) => ({ toolName: c.toolName, input: c.input })),
  toolResults: step.toolResults.map((r) => ({ toolName: r.toolName, output: r.output })),
}));
process.stdout.write(JSON.stringify({ plain, tools: { ...streamed, steps } }) + '\n');
