// The pipedit page: a create form over POST /v1/videos and this browser's jobs, followed live.
// No build step and nothing fetched from elsewhere. Job ids (and the last state seen) live in
// localStorage, so the queue survives a reload; the server stays the source of truth.
"use strict";

const JOBS_KEY = "pipedit.jobs";
const API_KEY = "pipedit.apiKey";
const FINAL = new Set(["completed", "failed", "cancelled"]);
const POLL_MS = 700;
const STREAM_RETRIES = 3;
const STREAM_REOPEN_MS = 250;

const $ = (id) => document.getElementById(id);
const jobs = new Map(); // id -> job state (a trimmed Video plus local flags)
const followers = new Map(); // id -> function that stops following
let options = null;

// -- storage --------------------------------------------------------------------------------
function loadJobs() {
  try {
    for (const job of JSON.parse(localStorage.getItem(JOBS_KEY) || "[]")) jobs.set(job.id, job);
  } catch (_) { localStorage.removeItem(JOBS_KEY); }
}

function saveJobs() {
  localStorage.setItem(JOBS_KEY, JSON.stringify([...jobs.values()]));
}

function apiKey() {
  return options && options.api_key_required ? localStorage.getItem(API_KEY) || "" : "";
}

// -- HTTP -----------------------------------------------------------------------------------
// `body`: an object (sent as JSON) or FormData (multipart: the browser writes its boundary).
async function api(method, path, body) {
  const headers = {};
  const form = body instanceof FormData;
  if (body !== undefined && !form) headers["Content-Type"] = "application/json";
  if (apiKey()) headers["Authorization"] = `Bearer ${apiKey()}`;
  const sent = body === undefined || form ? body : JSON.stringify(body);
  const reply = await fetch(path, { method, headers, body: sent });
  const data = await reply.json().catch(() => ({}));
  if (!reply.ok) {
    const error = new Error((data.error && data.error.message) || `${method} ${path}: HTTP ${reply.status}`);
    error.status = reply.status;
    throw error;
  }
  return data;
}

// -- the form -------------------------------------------------------------------------------
function fillForm(opts) {
  const d = opts.defaults;
  $("model-name").textContent = opts.model;
  for (const id of ["width", "height"]) {
    const input = $(id);
    Object.assign(input, { min: opts.size_multiple, max: opts.max_side, step: opts.size_multiple });
    input.value = id === "width" ? d.width : d.height;
  }
  const step = opts.frame_counts.length > 1 ? opts.frame_counts[1] - opts.frame_counts[0] : 1;
  $("limits-hint").textContent = `Width and height: multiples of ${opts.size_multiple} up to ${opts.max_side}. ` +
    `Frames: ${step}k+1 up to ${opts.max_frames}. Steps: 1 to ${opts.max_steps}.`;
  const frames = $("num_frames");
  frames.replaceChildren(...opts.frame_counts.map((count) => {
    const seconds = (count / d.fps).toFixed(2);
    return new Option(`${count} · ${seconds} s`, count, false, count === d.num_frames);
  }));
  Object.assign($("steps"), { max: opts.max_steps, value: d.num_inference_steps });
  $("seed").value = d.seed;
  $("prompt").maxLength = opts.max_prompt_chars;
  $("key-field").hidden = !opts.api_key_required;
  $("api-key").value = localStorage.getItem(API_KEY) || "";
  // What the model takes besides the prompt: a negative prompt (classifier-free guidance), a start image.
  $("negative-field").hidden = !opts.takes_negative_prompt;
  $("negative_prompt").maxLength = opts.max_prompt_chars;
  $("image-field").hidden = !opts.takes_image;
  $("image").required = Boolean(opts.needs_image);
  $("mode").textContent = opts.needs_image ? "Image" : opts.takes_image ? "Text or image" : "Text";
  $("image-hint").textContent = `${(opts.image_formats || []).join(", ")}; up to ` +
    `${(opts.max_image_pixels || 0).toLocaleString("en")} pixels` + (opts.needs_image ? "; required" : "; optional");
  $("more-fields").replaceChildren(...moreFields(opts).map(fieldInput));
  const adapters = opts.loras || [];
  $("loras-field").hidden = !adapters.length;
  $("loras").replaceChildren(...adapters.map(loraPick));
}

// One offered LoRA adapter: a checkbox to run with it, and its scale (the server's default first).
function loraPick(adapter, index) {
  const box = document.createElement("div");
  box.className = "field lora";
  const label = document.createElement("label");
  const use = Object.assign(document.createElement("input"), { type: "checkbox", id: `lora-${index}` });
  use.dataset.name = adapter.name;
  label.append(use, ` ${adapter.name}`);
  const scale = Object.assign(document.createElement("input"), {
    type: "number", step: "any", value: adapter.scale, id: `lora-${index}-scale`, title: `Scale of ${adapter.name}`,
  });
  box.append(label, scale);
  return box;
}

// The adapters ticked, as the create's `loras` (none: left out, the request runs without).
function chosenLoras() {
  const chosen = [];
  for (const use of $("loras").querySelectorAll("input[type=checkbox]")) {
    if (use.checked) chosen.push({ name: use.dataset.name, scale: Number($(`${use.id}-scale`).value) });
  }
  return chosen;
}

// Generation fields without a hand-made input above (guidance, fps, step cache, ...): one input
// each, from the field's description in the options, sent under its API name when filled in.
function moreFields(opts) {
  const handMade = (name) => {
    const input = document.getElementById(name);
    return input !== null && !input.closest("#more-fields");
  };
  return (opts.fields || []).filter((f) => f.type !== "file" && !handMade(f.name));
}

function fieldInput(f) {
  const box = document.createElement("div");
  box.className = "field";
  const label = document.createElement("label");
  label.htmlFor = f.name;
  label.textContent = f.label || f.name;
  label.title = f.description;
  const input = document.createElement("input");
  Object.assign(input, { id: f.name, name: f.param, title: f.description });
  if (f.type === "string") input.type = "text";
  else {
    Object.assign(input, { type: "number", step: f.type === "integer" ? "1" : "any" });
    if (f.minimum !== null) input.min = f.minimum;
    if (f.maximum !== null) input.max = f.maximum;
  }
  if (f.default !== null) input.value = f.default;
  else input.placeholder = "default";
  input.required = !f.nullable;
  box.append(label, input);
  return box;
}

function moreValues(opts) {
  const values = {};
  for (const f of moreFields(opts)) {
    const text = $(f.name).value.trim();
    if (text) values[f.param] = f.type === "string" ? text : Number(text);
  }
  return values;
}

// -- the start image ------------------------------------------------------------------------
const IMAGE_TYPES = { png: "image/png", jpeg: "image/jpeg", webp: "image/webp" };

function chosenImage() {
  return $("image-field").hidden ? null : $("image").files[0] || null;
}

function pickImage() {
  const file = $("image").files[0];
  const allowed = ((options && options.image_formats) || []).map((name) => IMAGE_TYPES[name]);
  let problem = "";
  if (file && !allowed.includes(file.type)) problem = `The start image must be ${options.image_formats.join(", ")}.`;
  else if (file && options && file.size > options.max_upload_bytes) {
    problem = `The start image has ${file.size.toLocaleString("en")} bytes; the server takes at most ` +
      `${options.max_upload_bytes.toLocaleString("en")}.`;
  }
  $("image").setCustomValidity(problem);
  $("form-error").textContent = problem;
  showPreview(file && !problem ? file : null);
}

function showPreview(file) {
  const preview = $("image-preview");
  if (preview.src.startsWith("blob:")) URL.revokeObjectURL(preview.src);
  if (file) preview.src = URL.createObjectURL(file);
  else preview.removeAttribute("src");
  preview.hidden = !file;
  $("clear-image").hidden = !$("image").files.length;
}

function clearImage() {
  $("image").value = "";
  pickImage();
}

async function submit(event) {
  event.preventDefault();
  const form = $("create-form");
  $("form-error").textContent = "";
  if (!$("prompt").value.trim()) $("prompt").setCustomValidity("Describe the video to generate.");
  else $("prompt").setCustomValidity("");
  if (!form.reportValidity()) return;
  const body = {
    prompt: $("prompt").value,
    size: `${$("width").value}x${$("height").value}`,
    num_frames: Number($("num_frames").value),
    num_inference_steps: Number($("steps").value),
    seed: Number($("seed").value),
    ...moreValues(options),
  };
  if (!$("negative-field").hidden && $("negative_prompt").value.trim()) body.negative_prompt = $("negative_prompt").value;
  const loras = chosenLoras();
  if (loras.length) body.loras = loras;
  const image = chosenImage();
  $("generate").disabled = true;
  try {
    const video = await api("POST", "/v1/videos", image ? asForm(body, image) : body);
    update(video);
    follow(video.id);
  } catch (error) {
    $("form-error").textContent = error.message;
  } finally {
    $("generate").disabled = false;
  }
}

// The create as multipart/form-data, as OpenAI's SDK sends an input_reference file.
function asForm(body, image) {
  const form = new FormData();
  // A list (loras) goes as one JSON field, which the server reads as the JSON body's list.
  for (const [name, value] of Object.entries(body)) {
    form.append(name, typeof value === "object" ? JSON.stringify(value) : String(value));
  }
  form.append("input_reference", image, image.name);
  return form;
}

// -- following a job ------------------------------------------------------------------------
function follow(id) {
  stopFollowing(id);
  // EventSource cannot send an Authorization header: with a key, poll instead (keys stay out of URLs).
  if (apiKey() || typeof EventSource === "undefined") poll(id);
  else stream(id);
}

function stopFollowing(id) {
  const stop = followers.get(id);
  followers.delete(id);
  if (stop) stop();
}

// `failures`: streams in a row that ended without a message; past STREAM_RETRIES, poll instead.
function stream(id, failures = 0) {
  const source = new EventSource(`/v1/videos/${encodeURIComponent(id)}/events`);
  followers.set(id, () => source.close());
  source.onmessage = (event) => {
    failures = 0;
    const video = JSON.parse(event.data);
    update(video);
    if (FINAL.has(video.status)) stopFollowing(id);
  };
  // The server's "event: error" (the job was deleted), the end of a stream at its lifetime
  // (serve.event_stream_max_s) and a dropped connection all land here.
  source.addEventListener("error", (event) => {
    if (followers.get(id) === undefined) return;
    stopFollowing(id);
    if (event.data) { markGone(id); return; }
    const tries = failures + 1;
    setTimeout(() => {
      if (!jobs.has(id) || FINAL.has(jobs.get(id).status) || followers.has(id)) return;
      if (tries > STREAM_RETRIES) poll(id);  // streams keep failing (e.g. 429 too_many_streams)
      else stream(id, tries);  // a stream at its lifetime: open the next one
    }, STREAM_REOPEN_MS * tries);
  });
}

function poll(id) {
  let timer = null;
  let stopped = false;
  followers.set(id, () => { stopped = true; clearTimeout(timer); });
  const tick = async () => {
    try {
      const video = await api("GET", `/v1/videos/${encodeURIComponent(id)}`);
      if (stopped) return;
      update(video);
      if (FINAL.has(video.status)) { stopFollowing(id); return; }
    } catch (error) {
      if (stopped) return;
      if (error.status === 404) { stopFollowing(id); markGone(id); return; }
      setNote(id, error.message);
    }
    timer = setTimeout(tick, POLL_MS);
  };
  tick();
}

async function cancel(id) {
  const job = jobs.get(id);
  job.cancelling = true;
  render(job);
  stopFollowing(id);
  try {
    await api("DELETE", `/v1/videos/${encodeURIComponent(id)}`);
    Object.assign(job, { status: "cancelled", stage: "cancelled", queue_position: null, cancelling: false });
  } catch (error) {
    job.cancelling = false;
    if (error.status === 404) job.gone = true;
    else { setNote(id, error.message); follow(id); }
  }
  saveJobs();
  render(job);
}

function markGone(id) {
  const job = jobs.get(id);
  if (!job || job.status === "cancelled") return;
  job.gone = true;
  saveJobs();
  render(job);
}

function setNote(id, message) {
  const job = jobs.get(id);
  if (!job) return;
  job.note = message;
  render(job);
}

// A trimmed Video: what the list shows and what survives a reload.
function update(video) {
  const x = video.pipedit;
  const job = Object.assign(jobs.get(video.id) || {}, {
    id: video.id, prompt: video.prompt, size: video.size, status: video.status, progress: video.progress,
    stage: x.stage, step: x.step, total_steps: x.total_steps, queue_position: x.queue_position,
    seed: x.seed, num_frames: x.num_frames, fps: x.fps, created_at: video.created_at, image: x.input_reference || null,
    error: video.error ? video.error.message : null, note: null, gone: false,
  });
  jobs.set(video.id, job);
  saveJobs();
  render(job);
}

// -- rendering ------------------------------------------------------------------------------
function stageText(job) {
  if (job.gone) return "No longer on the server.";
  if (job.cancelling) return "Cancelling…";
  switch (job.status) {
    case "queued":
      return job.queue_position === null || job.queue_position === undefined ? "Queued"
        : job.queue_position === 0 ? "Queued: next to run" : `Queued: ${job.queue_position} ahead`;
    case "in_progress":
      return job.stage === "denoising" ? `Denoising: step ${job.step} of ${job.total_steps}`
        : `${job.stage[0].toUpperCase()}${job.stage.slice(1)}…`;
    case "completed": return "Completed";
    case "cancelled": return "Cancelled";
    case "failed": return "Failed";
    default: return job.status;
  }
}

function elementFor(job) {
  let item = document.querySelector(`li.job[data-id="${CSS.escape(job.id)}"]`);
  if (!item) {
    item = $("job-template").content.firstElementChild.cloneNode(true);
    item.dataset.id = job.id;
    item.querySelector(".cancel").addEventListener("click", () => cancel(job.id));
    item.querySelector(".remove").addEventListener("click", () => remove(job.id));
    $("jobs").prepend(item);
  }
  return item;
}

function render(job) {
  const item = elementFor(job);
  const status = job.gone ? "gone" : job.status;
  item.dataset.status = status;
  item.querySelector(".job-prompt").textContent = job.prompt;
  item.querySelector(".badge").textContent = status.replace("_", " ");
  const image = job.image ? ` · from a ${job.image.width}x${job.image.height} ${job.image.format} image` : "";
  item.querySelector(".job-meta").textContent =
    `${job.size} · ${job.num_frames} frames · ${job.total_steps} steps · seed ${job.seed}${image} · ${job.id}`;
  const bar = item.querySelector(".job-progress");
  bar.value = job.progress || 0;
  bar.setAttribute("aria-label", `Progress of "${job.prompt}"`);
  bar.hidden = FINAL.has(job.status) || job.gone;
  item.querySelector(".job-stage").textContent = stageText(job) + (job.note ? ` (${job.note})` : "");
  const error = item.querySelector(".job-error");
  error.hidden = !job.error;
  error.textContent = job.error ? `Error: ${job.error}` : "";
  const running = !FINAL.has(job.status) && !job.gone;
  const cancelButton = item.querySelector(".cancel");
  cancelButton.hidden = !running;
  cancelButton.disabled = Boolean(job.cancelling);
  cancelButton.setAttribute("aria-label", `Cancel "${job.prompt}"`);
  item.querySelector(".remove").hidden = running;
  if (job.status === "completed" && !job.gone) showVideo(item, job);
  else item.querySelector(".job-media").replaceChildren();
  $("empty").hidden = jobs.size > 0;
}

async function showVideo(item, job) {
  const media = item.querySelector(".job-media");
  if (media.childElementCount) return; // made once: re-rendering must not restart playback
  const video = document.createElement("video");
  // A model that makes sound: the video plays with it, and a mute button turns it off and on.
  const sound = Boolean(options && options.has_sound);
  Object.assign(video, { controls: true, loop: true, muted: !sound, playsInline: true, preload: "metadata" });
  video.setAttribute("aria-label", `Video: ${job.prompt}`);
  const link = Object.assign(document.createElement("a"), { className: "download", textContent: "Download mp4" });
  link.download = `${job.id}.mp4`;
  media.replaceChildren(video, ...(sound ? [muteButton(video)] : []), link);
  const path = `/v1/videos/${encodeURIComponent(job.id)}/content`;
  if (!apiKey()) {
    video.src = link.href = path;
    return;
  }
  // A <video src> cannot send the key either: fetch the mp4 with it and play the blob.
  try {
    const reply = await fetch(path, { headers: { Authorization: `Bearer ${apiKey()}` } });
    if (!reply.ok) throw new Error(`HTTP ${reply.status}`);
    video.src = link.href = URL.createObjectURL(await reply.blob());
  } catch (error) {
    media.replaceChildren();
    setNote(job.id, `could not load the video: ${error.message}`);
  }
}

function muteButton(video) {
  const button = Object.assign(document.createElement("button"), { type: "button", className: "mute secondary" });
  const show = () => {
    button.textContent = video.muted ? "Unmute" : "Mute";
    button.setAttribute("aria-pressed", String(video.muted));
  };
  button.addEventListener("click", () => { video.muted = !video.muted; });
  video.addEventListener("volumechange", show); // the player's own mute control too
  show();
  return button;
}

function remove(id) {
  stopFollowing(id);
  jobs.delete(id);
  saveJobs();
  const item = document.querySelector(`li.job[data-id="${CSS.escape(id)}"]`);
  const video = item && item.querySelector("video");
  if (video && video.src.startsWith("blob:")) URL.revokeObjectURL(video.src);
  if (item) item.remove();
  $("empty").hidden = jobs.size > 0;
}

// -- start ----------------------------------------------------------------------------------
async function start() {
  $("create-form").addEventListener("submit", submit);
  $("random-seed").addEventListener("click", () => { $("seed").value = Math.floor(Math.random() * 2 ** 31); });
  $("image").addEventListener("change", pickImage);
  $("clear-image").addEventListener("click", clearImage);
  $("api-key").addEventListener("change", () => {
    localStorage.setItem(API_KEY, $("api-key").value.trim());
    for (const job of jobs.values()) if (!FINAL.has(job.status) && !job.gone) follow(job.id);
  });
  $("clear-finished").addEventListener("click", () => {
    for (const job of [...jobs.values()]) if (FINAL.has(job.status) || job.gone) remove(job.id);
  });
  try {
    options = await api("GET", "/v1/pipedit/options");
    fillForm(options);
  } catch (error) {
    $("form-error").textContent = `Could not read the server's options: ${error.message}`;
  }
  loadJobs();
  const oldestFirst = [...jobs.values()].sort((a, b) => (a.created_at || 0) - (b.created_at || 0));
  for (const job of oldestFirst) {
    render(job);
    if (job.status !== "cancelled" && !job.gone) follow(job.id); // also checks finished ones still exist
  }
  document.body.dataset.ready = "true";
}

start();
