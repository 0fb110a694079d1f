// The official OpenAI Node SDK, unmodified, against h3-studio: create,
// retrieve (polling), list, downloadContent and delete a clip end to end,
// and the SDK's error for a refused field. usage: node client.mjs BASE_URL OUT.mp4
import OpenAI from "openai";
import { writeFileSync } from "node:fs";

const [baseURL, out] = process.argv.slice(2);
const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "not-checked" });
let failed = 0, passed = 0;
const check = (cond, msg) => { if (cond) passed++; else { failed++; console.error("FAIL:", msg); } };

// the SDK's own fields: model, prompt, size, seconds (a string, as the SDK types it)
let video = await client.videos.create({ model: "minimax-h3", prompt: "a robot dancing", size: "64x32", seconds: "1" });
check(video.object === "video" && video.id.startsWith("video_"), `create: ${JSON.stringify(video)}`);
for (let i = 0; i < 1500 && (video.status === "queued" || video.status === "in_progress"); i++) {
  await new Promise((r) => setTimeout(r, 200));
  video = await client.videos.retrieve(video.id);
}
check(video.status === "completed" && video.progress === 100 && video.size === "64x32", `retrieve: ${JSON.stringify(video)}`);

const page = await client.videos.list({ limit: 10 });
check(page.data.some((v) => v.id === video.id), `list: ${JSON.stringify(page.data)}`);

const content = await client.videos.downloadContent(video.id);
const bytes = Buffer.from(await content.arrayBuffer());
writeFileSync(out, bytes);
check(bytes.length > 1000 && bytes.subarray(4, 8).toString() === "ftyp", `downloadContent: ${bytes.length} bytes`);

try {
  await client.videos.create({ model: "sora-2", prompt: "x" });
  check(false, "sora-2 accepted");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400 && /not served here/.test(e.message), `model error: ${e}`);
}

const deleted = await client.videos.delete(video.id);
check(deleted.deleted === true && deleted.id === video.id, `delete: ${JSON.stringify(deleted)}`);
try {
  await client.videos.retrieve(video.id);
  check(false, "retrieve after delete");
} catch (e) {
  check(e instanceof OpenAI.NotFoundError, `after delete: ${e}`);
}
console.log(`openai-node: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
