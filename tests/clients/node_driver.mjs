// Drives real Node client libraries for the client matrix (tests/test_client_matrix.py); the same jobs and
// results as tests/clients/py_driver.py (its docstring describes both). Run by the tier from a folder whose
// node_modules is the cached environment of .ci/build-client-envs. Reads a JSON list of jobs on standard input,
// writes a JSON list of results on standard output.
import OpenAI from 'openai';
import { generateText, jsonSchema, streamText, tool } from 'ai';
import { createOpenRouter } from '@openrouter/ai-sdk-provider';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';

class TurnTwoError extends Error {
  constructor(cause) {
    super(String(cause?.message ?? cause));
    this.cause = cause;
  }
}

const followup = (job, calls) =>
  calls.length
    ? calls.map((call) => ({ role: 'tool', tool_call_id: call.id, content: job.tool_result }))
    : [{ role: 'user', content: job.next_user }];

const reasoningOf = (fields) => {
  for (const name of ['reasoning', 'reasoning_content']) {
    if (typeof fields?.[name] === 'string') return fields[name];
  }
  return null;
};

// openai-node's client.chat.completions.stream() helper; its final message goes into the history as it is.
async function openaiNodeHelper(job) {
  const client = new OpenAI({
    baseURL: job.base_url,
    apiKey: job.api_key,
    defaultHeaders: job.headers,
    maxRetries: 0,
    timeout: job.timeout * 1000,
  });
  const tools = job.tools.length ? { tools: job.tools.map((t) => ({ type: 'function', function: t })) } : {};
  const stream = client.chat.completions.stream({ model: job.model, messages: job.messages, ...tools });
  const reasoning = [];
  for await (const chunk of stream) {
    const text = reasoningOf(chunk.choices?.[0]?.delta);
    if (text) reasoning.push(text);
  }
  const message = await stream.finalMessage();
  const calls = (message.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments }));
  try {
    const next = client.chat.completions.stream({
      model: job.model,
      messages: [...job.messages, message, ...followup(job, calls)],
      ...tools,
    });
    for await (const _ of next) {
      // drained
    }
  } catch (error) {
    throw new TurnTwoError(error);
  }
  return { reasoning: reasoning.length ? reasoning.join('') : null, content: message.content, tool_calls: calls };
}

// The AI SDK (streamText or generateText) with a chat model of the given provider; the response's own messages
// go into the history, then a tool result per tool call (or the next user message).
function aiSdk(kind) {
  return async (job) => {
    const settings = { baseURL: job.base_url, apiKey: job.api_key, headers: job.headers };
    const model =
      kind === 'openrouter'
        ? createOpenRouter(settings).chat(job.model)
        : createOpenAICompatible({ name: 'matrix', ...settings }).chatModel(job.model);
    const tools = job.tools.length
      ? Object.fromEntries(
          job.tools.map((t) => [t.name, tool({ description: t.description, inputSchema: jsonSchema(t.parameters) })]),
        )
      : undefined;
    const ask = async (messages) => {
      const options = { model, messages, tools, maxRetries: 0, abortSignal: AbortSignal.timeout(job.timeout * 1000) };
      if (!job.stream) return generateText(options);
      const result = streamText(options);
      for await (const part of result.fullStream) {
        if (part.type === 'error') throw part.error;
      }
      return {
        reasoningText: await result.reasoningText,
        text: await result.text,
        toolCalls: await result.toolCalls,
        response: await result.response,
      };
    };
    const messages = [{ role: 'user', content: job.messages[0].content }];
    const first = await ask(messages);
    const calls = first.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, arguments: JSON.stringify(c.input) }));
    const nexts = calls.length
      ? [
          {
            role: 'tool',
            content: calls.map((c) => ({
              type: 'tool-result',
              toolCallId: c.id,
              toolName: c.name,
              output: { type: 'text', value: job.tool_result },
            })),
          },
        ]
      : [{ role: 'user', content: job.next_user }];
    try {
      await ask([...messages, ...first.response.messages, ...nexts]);
    } catch (error) {
      throw new TurnTwoError(error);
    }
    return { reasoning: first.reasoningText ?? null, content: first.text, tool_calls: calls };
  };
}

const CLIENTS = {
  'openai-node-helper': openaiNodeHelper,
  'ai-sdk-openrouter': aiSdk('openrouter'),
  'ai-sdk-openai-compatible': aiSdk('openai-compatible'),
};

// The error's name and the names of the classes on its prototype chain, most specific first.
function errorChain(error) {
  const names = [];
  if (error && typeof error.name === 'string') names.push(error.name);
  for (let proto = Object.getPrototypeOf(error ?? {}); proto; proto = Object.getPrototypeOf(proto)) {
    const name = proto.constructor?.name;
    if (name && !names.includes(name)) names.push(name);
  }
  return names;
}

async function runJob(job) {
  try {
    return { id: job.id, ok: true, ...(await CLIENTS[job.client](job)) };
  } catch (caught) {
    const stage = caught instanceof TurnTwoError ? 'turn2' : 'turn1';
    const error = caught instanceof TurnTwoError ? caught.cause : caught;
    const chain = errorChain(error);
    return {
      id: job.id,
      ok: false,
      stage,
      error_type: chain[0] ?? typeof error,
      error_mro: chain,
      error: String(error?.message ?? error).slice(0, 2000),
    };
  }
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const jobs = JSON.parse(Buffer.concat(chunks).toString('utf8'));
const results = [];
for (const job of jobs) results.push(await runJob(job));
process.stdout.write(JSON.stringify(results));
