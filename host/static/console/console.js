// The aviso-py browser console: a form built from the schema API, watch and replay streamed
// with fetch (the API is POST, which EventSource cannot send), and a notify form.
// Plain script, no dependencies: it is served by the server itself and works offline.
"use strict";

(() => {
  // Every URL is relative to the page, so the console works under any mount prefix.
  const API = {
    schema: "api/v1/schema",
    status: "status",
    watch: "api/v1/watch",
    replay: "api/v1/replay",
    notify: "api/v1/notification",
    subscriptions: "api/v1/subscriptions",
  };
  const CURSORS = ["from_id", "from_date", "to_id", "to_date"];
  const REPLAY_ONLY = ["to_id", "to_date"];
  const RATE_WINDOW_MS = 60_000;
  const SUBSCRIPTIONS_REFRESH_MS = 10_000;
  const MAX_ROWS = 2000; // older rows are dropped so a long watch cannot exhaust the tab
  const CREDENTIALS_KEY = "aviso-console-credentials";
  const OPERATOR_LABELS = {
    eq: "=", in: "in", gt: ">", gte: "≥", lt: "<", lte: "≤", between: "between",
  };

  const $ = (id) => document.getElementById(id);
  const form = $("query");
  const eventTypeSelect = $("event-type");
  const fieldsBox = $("fields");
  const publishBox = $("publish-fields");
  const eventsList = $("events");
  const stateLine = $("state");
  const rateLine = $("rate");
  const errorBox = $("error");

  let schemas = {};
  let stream = null; // {controller, kind}
  let arrivals = []; // arrival times (ms) of notifications in the last minute
  let streamStarted = 0;
  let counts = { replay: 0, live: 0 };
  let lastSequence = null;
  let replayDone = false;
  let lastKind = "replay"; // what a "continue" button resumes: the stream it belongs to

  // -- small DOM helpers ---------------------------------------------------------------

  function element(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "text") node.textContent = value;
      else if (name === "className") node.className = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) if (child) node.append(child);
    return node;
  }

  function setState(state, text) {
    stateLine.dataset.state = state;
    stateLine.textContent = text || state;
  }

  function showError(title, message, box = errorBox) {
    box.replaceChildren(element("strong", { text: title }), " ", message || "");
    box.hidden = false;
  }

  function clearError() {
    errorBox.hidden = true;
    errorBox.replaceChildren();
  }

  // -- credentials (session storage only) ------------------------------------------------

  function loadCredentials() {
    try {
      const saved = JSON.parse(sessionStorage.getItem(CREDENTIALS_KEY) || "{}");
      $("auth-scheme").value = saved.scheme === "basic" ? "basic" : "bearer";
      $("auth-token").value = saved.token || "";
      $("auth-user").value = saved.user || "";
      $("auth-password").value = saved.password || "";
    } catch (error) {
      sessionStorage.removeItem(CREDENTIALS_KEY);
    }
    showSchemeInputs();
  }

  function saveCredentials() {
    sessionStorage.setItem(CREDENTIALS_KEY, JSON.stringify({
      scheme: $("auth-scheme").value,
      token: $("auth-token").value,
      user: $("auth-user").value,
      password: $("auth-password").value,
    }));
  }

  function showSchemeInputs() {
    const basic = $("auth-scheme").value === "basic";
    $("auth-basic").hidden = !basic;
    $("auth-bearer").hidden = basic;
  }

  function authorization() {
    if ($("auth-scheme").value === "basic") {
      const user = $("auth-user").value;
      if (!user) return null;
      const bytes = new TextEncoder().encode(`${user}:${$("auth-password").value}`);
      return "Basic " + btoa(String.fromCharCode(...bytes));
    }
    const token = $("auth-token").value.trim();
    return token ? `Bearer ${token}` : null;
  }

  // -- the form, built from the schema ---------------------------------------------------

  function fieldKind(rule) {
    return rule.value_kind || "text";
  }

  function placeholderFor(name, rule) {
    switch (fieldKind(rule)) {
      case "integer": return rule.range ? `${rule.range[0]}…${rule.range[1]}` : "integer";
      case "float": return rule.range ? `${rule.range[0]}…${rule.range[1]}` : "number";
      case "date": return "YYYYMMDD or YYYY-MM-DD";
      case "time": return "HHMM or HH:MM";
      case "polygon": return "[[lat, lon], …] (closed ring)";
      case "point": return "[[lat, lon], …]";
      default: return rule.max_length ? `text, at most ${rule.max_length} bytes` : "text";
    }
  }

  // An input for one identifier field: the subscription's ("field") or the publish form's
  // ("publish"), which a notify fills in full, with plain values only.
  function valueInput(name, rule, role = "field") {
    const id = `${role}-${name}`;
    const marker = { [`data-${role}`]: name };
    const kind = fieldKind(rule);
    if (kind === "enum" && Array.isArray(rule.values)) {
      const select = element("select", { id, name, ...marker });
      const blank = role === "publish" || rule.required ? "choose…" : "any";
      select.append(element("option", { value: "", text: blank }));
      for (const value of rule.values) select.append(element("option", { value, text: value }));
      return select;
    }
    if (kind === "polygon" || kind === "point") {
      return element("textarea", {
        id, name, ...marker, rows: 2, spellcheck: "false",
        placeholder: placeholderFor(name, rule),
      });
    }
    return element("input", {
      id, name, ...marker, autocomplete: "off",
      inputmode: kind === "integer" || kind === "float" ? "decimal" : null,
      placeholder: placeholderFor(name, rule),
    });
  }

  function buildFields() {
    const schema = schemas[eventTypeSelect.value];
    fieldsBox.replaceChildren(element("legend", { text: "Identifier" }));
    if (!schema) return;
    const identifier = schema.identifier || {};
    for (const [name, rule] of Object.entries(identifier)) {
      const kind = fieldKind(rule);
      const operators = Array.isArray(rule.operators) ? rule.operators : [];
      const label = element(
        "label", { for: `field-${name}` }, name,
        element("span", { className: "kind", text: ` ${kind}${rule.required ? ", required" : ""}` }),
      );
      const row = element("div", { className: operators.length ? "field-row" : "field-row single" });
      if (operators.length) {
        const select = element("select", { id: `op-${name}`, "aria-label": `${name} operator` });
        select.append(element("option", { value: "", text: "value" }));
        for (const operator of operators) {
          select.append(element("option", { value: operator, text: OPERATOR_LABELS[operator] || operator }));
        }
        row.append(select);
      }
      row.append(valueInput(name, rule));
      fieldsBox.append(label, row);
      if (rule.description) fieldsBox.append(element("p", { className: "note", text: rule.description }));
      if (kind === "polygon") {
        // A polygon field may instead be filtered by one point (watch and replay only).
        fieldsBox.append(
          element("label", { for: "field-point" }, "point",
            element("span", { className: "kind", text: " instead of the polygon: lat,lon" })),
          element("input", { id: "field-point", name: "point", "data-field": "point", autocomplete: "off", placeholder: "lat,lon" }),
        );
      }
      if (kind === "point") {
        fieldsBox.append(element("p", {
          className: "note",
          text: `Watch and replay match ${name} with a polygon: a notification matches when one of its points lies inside. Publish sends the points.`,
        }));
      }
    }
    $("schema-note").textContent = schema.payload && schema.payload.required ? "A payload is required." : "";
    buildPublishFields(schema);
  }

  // The publish form's own identifier: editing it never changes the running stream's.
  function buildPublishFields(schema) {
    publishBox.replaceChildren(element("legend", { text: "Identifier" }));
    for (const [name, rule] of Object.entries(schema.identifier || {})) {
      publishBox.append(
        element("label", { for: `publish-${name}` }, name,
          element("span", { className: "kind", text: ` ${fieldKind(rule)}` })),
        valueInput(name, rule, "publish"),
      );
    }
    if ($("publish-panel").open) prefillPublish();
  }

  // Empty publish fields take the subscription's plain values (not its operators).
  function prefillPublish() {
    for (const input of publishBox.querySelectorAll("[data-publish]")) {
      const name = input.dataset.publish;
      const source = $(`field-${name}`);
      const select = $(`op-${name}`);
      if (input.value.trim() === "" && source && !(select && select.value)) input.value = source.value;
    }
  }

  function publishIdentifier() {
    const identifier = {};
    for (const input of publishBox.querySelectorAll("[data-publish]")) {
      const name = input.dataset.publish;
      const text = input.value;
      if (text.trim() === "") continue;
      const kind = kindOf(name);
      identifier[name] = kind === "polygon" || kind === "point" ? spatialValue(text) : text.trim();
    }
    return identifier;
  }

  function fieldInputs() {
    return [...fieldsBox.querySelectorAll("[data-field]")];
  }

  function kindOf(name) {
    const schema = schemas[eventTypeSelect.value];
    const rule = schema && schema.identifier ? schema.identifier[name] : null;
    return rule ? fieldKind(rule) : "text";
  }

  function number(text, kind) {
    const trimmed = text.trim();
    const pattern = kind === "integer" ? /^[+-]?\d+$/ : /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
    return pattern.test(trimmed) ? Number(trimmed) : trimmed;
  }

  function operand(operator, text, kind) {
    const numeric = kind === "integer" || kind === "float";
    const one = (item) => (numeric ? number(item, kind) : item.trim());
    if (operator === "in" || operator === "between") {
      return text.split(",").filter((item) => item.trim() !== "").map(one);
    }
    return one(text);
  }

  function spatialValue(text) {
    const trimmed = text.trim();
    if (!trimmed.startsWith("[")) return trimmed;
    try {
      return JSON.parse(trimmed);
    } catch (error) {
      return trimmed; // the server explains what is wrong with it
    }
  }

  // The identifier of a watch/replay (operators allowed).
  function identifierFrom() {
    const identifier = {};
    for (const input of fieldInputs()) {
      const name = input.dataset.field;
      const text = input.value;
      if (text.trim() === "") continue;
      const kind = name === "point" ? "text" : kindOf(name);
      if (kind === "point") {
        // A point cloud is notified as its points and filtered with a polygon.
        identifier.polygon = spatialValue(text);
        continue;
      }
      if (name === "point") {
        identifier.point = text.trim();
        continue;
      }
      const select = $(`op-${name}`);
      const operator = select ? select.value : "";
      if (kind === "polygon") identifier[name] = spatialValue(text);
      else if (operator) identifier[name] = { [operator]: operand(operator, text, kind) };
      else identifier[name] = text.trim();
    }
    return identifier;
  }

  // -- URL query string <-> form ------------------------------------------------------------

  function queryFromForm(action) {
    const query = new URLSearchParams();
    query.set("event_type", eventTypeSelect.value);
    for (const input of fieldInputs()) {
      const text = input.value.trim();
      if (!text) continue;
      const select = $(`op-${input.dataset.field}`);
      query.set(input.dataset.field, select && select.value ? `${select.value}:${text}` : text);
    }
    for (const name of CURSORS) {
      const text = $(name).value.trim();
      if (text && !(action === "watch" && REPLAY_ONLY.includes(name))) query.set(name, text);
    }
    if (action) query.set(action, "1");
    return query;
  }

  function formFromQuery(query) {
    for (const input of fieldInputs()) {
      const name = input.dataset.field;
      if (!query.has(name)) continue;
      let text = query.get(name);
      const select = $(`op-${name}`);
      if (select) {
        const colon = text.indexOf(":");
        const operator = colon > 0 ? text.slice(0, colon) : "";
        if (operator && [...select.options].some((option) => option.value === operator)) {
          select.value = operator;
          text = text.slice(colon + 1);
        }
      }
      input.value = text;
    }
    for (const name of CURSORS) if (query.has(name)) $(name).value = query.get(name);
  }

  function rememberInUrl(action) {
    const url = new URL(window.location.href);
    url.search = queryFromForm(action).toString();
    window.history.replaceState(null, "", url);
  }

  // -- the event list ---------------------------------------------------------------------

  function append(row) {
    eventsList.append(row);
    while (eventsList.childElementCount > MAX_ROWS) eventsList.firstElementChild.remove();
  }

  function jsonToggle(value) {
    const pre = element("pre", { hidden: true });
    pre.textContent = JSON.stringify(value, null, 2);
    const button = element("button", { type: "button", "aria-expanded": "false", text: "JSON" });
    button.addEventListener("click", () => {
      pre.hidden = !pre.hidden;
      button.setAttribute("aria-expanded", String(!pre.hidden));
    });
    return [button, pre];
  }

  function identifierText(identifier) {
    return Object.entries(identifier || {})
      .map(([key, value]) => `${key}=${typeof value === "string" ? value : JSON.stringify(value)}`)
      .join(" ");
  }

  function showNotification(cloudEvent, source) {
    const sequence = typeof cloudEvent.sequence === "number"
      ? cloudEvent.sequence
      : Number(String(cloudEvent.id || "").split("@").pop());
    lastSequence = sequence;
    counts[source] += 1;
    arrivals.push(performance.now());
    const data = cloudEvent.data || {};
    const [button, pre] = jsonToggle(cloudEvent);
    const payload = data.payload === undefined || data.payload === null ? "" : JSON.stringify(data.payload);
    append(element("li", { className: `event notification ${source}`, "data-sequence": sequence },
      element("div", { className: "head" },
        element("span", { className: "seq", text: `#${sequence}` }),
        element("span", { className: "source", text: source }),
        element("time", { className: "time", datetime: cloudEvent.time, text: cloudEvent.time || "" }),
        element("span", { className: "ident", text: identifierText(data.identifier) }),
        button),
      payload ? element("div", { className: "payload", text: payload.length > 200 ? payload.slice(0, 200) + "…" : payload }) : null,
      pre));
    updateRate();
  }

  function showControl(kind, text, tone, data, extra) {
    const [button, pre] = jsonToggle(data);
    append(element("li", { className: `event control ${tone || ""}`, "data-kind": kind },
      element("div", { className: "head" },
        element("span", { className: "label", text: kind.replace(/_/g, " ") }),
        element("span", { className: "text", text }),
        extra,
        button),
      pre));
  }

  function continueButton(fromId) {
    const button = element("button", { type: "button", text: `Continue from_id ${fromId}` });
    button.addEventListener("click", () => {
      $("from_id").value = String(fromId);
      $("from_date").value = "";
      start(lastKind, true);
    });
    return button;
  }

  function handleFrame(name, data) {
    if (name === "heartbeat") return;
    if ((name === "live-notification" || name === "replay") && String(data.type || "").startsWith("int.ecmwf.aviso.")) {
      showNotification(data, name === "replay" ? "replay" : "live");
      return;
    }
    const type = data.type || name;
    switch (type) {
      case "connection_established":
        setState("streaming", "watching live");
        showControl(type, `topic ${data.topic}; the server closes it in ${data.connection_will_close_in_seconds} s`, "", data);
        return;
      case "replay_started": {
        setState("streaming", "replaying history");
        const end = data.end_sequence === null || data.end_sequence === undefined ? "" : ` to ${data.end_sequence}`;
        const from = data.from_sequence !== null && data.from_sequence !== undefined ? `from ${data.from_sequence}` : `from ${data.from_date}`;
        showControl(type, `topic ${data.topic}, ${from}${end}`, "", data);
        return;
      }
      case "replay_completed":
        replayDone = true;
        if (stream && stream.kind === "watch") setState("streaming", "watching live");
        showControl(type, `${counts.replay} replayed`, "", data);
        return;
      case "notification_replay_limit_reached": {
        const next = lastSequence === null ? null : lastSequence + 1;
        showControl(type, data.message || `limited to ${data.max_allowed}`, "warn", data,
          next === null ? null : continueButton(next));
        return;
      }
      case "history_gap":
        showControl(type, `requested from ${data.requested_from_sequence}, history starts at ${data.first_available_sequence}`, "warn", data);
        return;
      case "notifications_skipped":
        showControl(type, `${data.skipped} skipped (${data.first_skipped_sequence}–${data.last_skipped_sequence})`, "warn", data);
        return;
      default:
        break;
    }
    if (name === "error") {
      showControl("error", `${data.error || "error"}: ${data.message || ""}`, "bad", data);
      return;
    }
    if (name === "connection-closing") {
      const cause = data.cause ? ` (${data.cause})` : "";
      const resume = data.resume_from_sequence;
      showControl("connection_closing", `${data.reason}${cause}: ${data.message || ""}`,
        data.reason === "end_of_stream" && !data.cause ? "" : "warn", data,
        typeof resume === "number" ? continueButton(resume) : null);
      if (data.reason === "end_of_stream" && !data.cause && replayDone) setState("done", "replay complete");
      else setState("closed", `closed by the server: ${data.reason}${cause}`);
      return;
    }
    showControl(type, "", "", data);
  }

  // Reads "event:"/"data:" frames from a streamed response body.
  async function readFrames(response, onFrame) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message";
        const data = [];
        for (const line of frame.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (!data.length) continue;
        let parsed;
        try {
          parsed = JSON.parse(data.join("\n"));
        } catch (error) {
          parsed = { type: name, message: data.join("\n") };
        }
        onFrame(name, parsed);
      }
    }
  }

  // -- rate line ---------------------------------------------------------------------------

  function updateRate() {
    const now = performance.now();
    while (arrivals.length && now - arrivals[0] > RATE_WINDOW_MS) arrivals.shift();
    const window = Math.min(RATE_WINDOW_MS, Math.max(1000, now - streamStarted)) / 1000;
    const total = counts.replay + counts.live;
    rateLine.textContent =
      `${total} notification${total === 1 ? "" : "s"} (${counts.replay} replayed, ${counts.live} live) · ` +
      `${(arrivals.length / window).toFixed(2)}/s over the last minute`;
  }

  // -- requests ----------------------------------------------------------------------------

  // Requests carry only the console's own Authorization header: "omit" also keeps the
  // browser from answering a Basic challenge with its own login dialog, so a 401 reaches
  // the page and its message is shown.
  function headers() {
    const result = { "Content-Type": "application/json" };
    const value = authorization();
    if (value) result.Authorization = value;
    return result;
  }

  // The server's error as a title ("401 UNAUTHORIZED") and its message.
  async function refusalText(response) {
    let body = null;
    try {
      body = await response.json();
    } catch (error) {
      body = null;
    }
    const message = body && (body.message || body.error) ? body.message || body.error : response.statusText;
    const code = body && body.code ? ` ${body.code}` : "";
    return [`${response.status}${code}`, message];
  }

  async function refusal(response) {
    const [title, message] = await refusalText(response);
    showError(title, message);
    if (response.status === 401 || response.status === 403) {
      const auth = $("auth");
      auth.open = true;
      ($("auth-scheme").value === "basic" ? $("auth-user") : $("auth-token")).focus();
    }
  }

  function stop() {
    if (stream) stream.controller.abort();
  }

  // ``continuing``: the same reading, resumed (its events and counts go on); otherwise the
  // list starts over with the counts, so both always describe one reading.
  async function start(kind, continuing = false) {
    stop();
    clearError();
    rememberInUrl(kind);
    const body = { event_type: eventTypeSelect.value, identifier: identifierFrom() };
    for (const name of CURSORS) {
      const text = $(name).value.trim();
      if (text && !(kind === "watch" && REPLAY_ONLY.includes(name))) body[name] = text;
    }
    const controller = new AbortController();
    const current = { controller, kind };
    lastKind = kind;
    stream = current;
    if (!continuing) {
      eventsList.replaceChildren();
      counts = { replay: 0, live: 0 };
      arrivals = [];
    }
    lastSequence = null;
    replayDone = false;
    streamStarted = performance.now();
    updateRate();
    $("stop").disabled = false;
    setState("connecting", `connecting (${kind})…`);
    try {
      const response = await fetch(kind === "watch" ? API.watch : API.replay, {
        method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal,
        cache: "no-store", credentials: "omit",
      });
      if (!response.ok) {
        await refusal(response);
        setState("failed", `refused (${response.status})`);
        return;
      }
      await readFrames(response, handleFrame);
      if (!["closed", "done"].includes(stateLine.dataset.state)) setState("closed", "the stream ended");
    } catch (error) {
      if (error.name === "AbortError") setState("idle", "stopped");
      else {
        showError("Connection failed:", String(error.message || error));
        setState("failed", "connection failed");
      }
    } finally {
      if (stream === current) {
        stream = null;
        $("stop").disabled = true;
      }
    }
  }

  async function publish() {
    clearError();
    const result = $("publish-result");
    result.textContent = "";
    const body = { event_type: eventTypeSelect.value, identifier: publishIdentifier() };
    const text = $("payload").value.trim();
    if (text) {
      try {
        body.payload = JSON.parse(text);
      } catch (error) {
        showError("Payload:", `not valid JSON (${error.message})`);
        return;
      }
    }
    const response = await fetch(API.notify, {
      method: "POST", headers: headers(), body: JSON.stringify(body), credentials: "omit",
    });
    if (!response.ok) {
      await refusal(response);
      return;
    }
    const answer = await response.json();
    result.textContent = `Published (request ${answer.request_id}, ${answer.processed_at}).`;
  }

  // -- subscriptions the server keeps -------------------------------------------------------

  const subscriptionsList = $("subscriptions-list");
  const subscriptionsStatus = $("subscriptions-status");
  const subscriptionsError = $("subscriptions-error");
  let subscriptionsRefresh = null; // the refresh in flight, shared by whoever asks meanwhile
  let subscriptionsOffered = true;

  function subscriptionUrl(name, tail = "") {
    return `${API.subscriptions}/${encodeURIComponent(name)}${tail}`;
  }

  // GET ``url`` as JSON; a refusal is shown (without taking the focus: a refresh runs on its
  // own) and answers null.
  async function fetchJson(url) {
    const response = await fetch(url, { headers: headers(), cache: "no-store", credentials: "omit" });
    if (!response.ok) {
      if (response.status !== 404) showError(...await refusalText(response), subscriptionsError);
      return { missing: response.status === 404, body: null };
    }
    return { missing: false, body: await response.json() };
  }

  function figure(label, value) {
    return element("div", {},
      element("dt", { text: label }),
      element("dd", { text: value === null || value === undefined ? "–" : String(value) }));
  }

  function subscriptionRow(state, letters) {
    const deliveries = state.deliveries;
    const kind = state.delivery ? state.delivery.kind : "pull";
    const status = deliveries ? deliveries.status : "active";
    const row = element("li", { className: "subscription", "data-name": state.name, "data-status": status },
      element("div", { className: "head" },
        element("span", { className: "name", text: state.name }),
        element("span", { text: state.event_type }),
        element("span", { className: "kind", text: kind }),
        element("span", { className: `status-${status}`, text: status }),
        element("span", { className: "ident", text: identifierText(state.identifier) })));
    const figures = element("dl", { className: "figures" },
      figure("cursor", state.acknowledged_sequence),
      figure("pending", state.pending),
      figure("lag", state.lag_seconds === null ? null : `${state.lag_seconds} s`));
    if (deliveries) {
      figures.append(
        figure("delivered", deliveries.delivered),
        figure("retrying", deliveries.retrying),
        figure("dead-lettered", deliveries.dead_lettered));
    }
    row.append(figures);
    if (deliveries && deliveries.last_error) {
      const last = deliveries.last_error;
      row.append(element("p", {
        className: "last-error",
        text: `last error: #${last.sequence}, attempt ${last.attempt}: ${last.error || "failed"} (${last.at})`,
      }));
    }
    if (letters) {
      const kept = letters.dead_letters || [];
      const dropped = letters.dropped ? `, ${letters.dropped} forgotten` : "";
      row.append(element("p", { className: "note", text: `${kept.length} dead letter(s)${dropped}` }));
      if (kept.length) {
        const list = element("ol", { className: "dead-letters" });
        for (const letter of kept) {
          list.append(element("li", {
            "data-sequence": letter.sequence,
            text: `#${letter.sequence} · ${letter.attempts} attempt(s) · ${letter.error || "failed"} · ${letter.dead_lettered_at}`,
          }));
        }
        row.append(list);
      }
      const button = element("button", { type: "button", className: "redrive", text: "Redrive", disabled: !kept.length });
      button.addEventListener("click", () => {
        redrive(state.name, button).catch((error) =>
          showError("Redrive failed:", String(error.message || error), subscriptionsError));
      });
      row.append(element("div", { className: "actions" }, button));
    }
    return row;
  }

  async function loadSubscription(name) {
    const state = await fetchJson(subscriptionUrl(name));
    if (!state.body) return null; // deleted meanwhile, or refused (shown)
    const letters = state.body.delivery ? await fetchJson(subscriptionUrl(name, "/dead-letters")) : null;
    return subscriptionRow(state.body, letters && letters.body);
  }

  async function loadSubscriptions() {
    subscriptionsError.hidden = true;
    const listed = await fetchJson(API.subscriptions);
    if (listed.missing) {
      subscriptionsOffered = false;
      subscriptionsList.replaceChildren();
      subscriptionsStatus.textContent = "This server keeps no subscriptions.";
      return;
    }
    if (!listed.body) return;
    const names = (listed.body.subscriptions || []).map((subscription) => subscription.name);
    const rows = await Promise.all(names.map(loadSubscription));
    subscriptionsList.replaceChildren(...rows.filter(Boolean));
    subscriptionsStatus.textContent =
      `${names.length} subscription(s) · updated ${new Date().toLocaleTimeString()}`;
  }

  function refreshSubscriptions() {
    if (!subscriptionsRefresh) {
      subscriptionsRefresh = loadSubscriptions()
        .catch((error) => showError("Subscriptions:", String(error.message || error), subscriptionsError))
        .finally(() => {
          subscriptionsRefresh = null;
        });
    }
    return subscriptionsRefresh;
  }

  async function redrive(name, button) {
    button.disabled = true;
    const response = await fetch(subscriptionUrl(name, "/dead-letters/redrive"), {
      method: "POST", headers: headers(), credentials: "omit",
    });
    if (!response.ok) {
      showError(...await refusalText(response), subscriptionsError);
      return;
    }
    const answer = await response.json();
    await refreshSubscriptions();
    subscriptionsStatus.textContent = `${answer.redriven} dead letter(s) of ${name} redriven.`;
  }

  // -- server status -------------------------------------------------------------------------

  async function refreshStatus() {
    const line = $("server-status");
    try {
      const response = await fetch(API.status, { cache: "no-store" });
      const status = await response.json();
      const backend = status.backend || {};
      line.textContent =
        `version ${status.version} · backend ${backend.kind} ${backend.ready ? "ready" : "not ready"} · ` +
        `${Number(status.notifications && status.notifications.per_second || 0).toFixed(2)} notifications/s published`;
    } catch (error) {
      line.textContent = "server status unavailable";
    }
  }

  // -- start-up ------------------------------------------------------------------------------

  async function loadSchemas() {
    const response = await fetch(API.schema, { cache: "no-store" });
    const catalogue = await response.json();
    schemas = catalogue.schema || {};
    eventTypeSelect.replaceChildren();
    for (const name of catalogue.event_types || []) {
      eventTypeSelect.append(element("option", { value: name, text: name }));
    }
    if (!(catalogue.event_types || []).length) {
      // Permissive servers accept event types without a schema: let one be typed in.
      $("schema-note").textContent = catalogue.message || "No event types are configured.";
    }
  }

  async function init() {
    loadCredentials();
    for (const id of ["auth-scheme", "auth-token", "auth-user", "auth-password"]) {
      $(id).addEventListener("input", saveCredentials);
      $(id).addEventListener("change", saveCredentials);
    }
    $("auth-scheme").addEventListener("change", showSchemeInputs);
    $("auth-forget").addEventListener("click", () => {
      sessionStorage.removeItem(CREDENTIALS_KEY);
      loadCredentials();
    });
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const action = event.submitter && event.submitter.value === "replay" ? "replay" : "watch";
      start(action);
    });
    $("stop").addEventListener("click", stop);
    $("clear").addEventListener("click", () => {
      eventsList.replaceChildren();
      counts = { replay: 0, live: 0 };
      arrivals = [];
      updateRate();
    });
    $("publish-panel").addEventListener("toggle", () => {
      if ($("publish-panel").open) prefillPublish();
    });
    $("publish").addEventListener("click", () => {
      publish().catch((error) => showError("Publish failed:", String(error.message || error)));
    });
    eventTypeSelect.addEventListener("change", () => {
      buildFields();
      rememberInUrl(null);
    });
    setInterval(() => {
      if (stream) updateRate();
    }, 1000);
    refreshStatus();
    setInterval(refreshStatus, 5000);
    $("subscriptions-refresh").addEventListener("click", () => {
      subscriptionsOffered = true;
      refreshSubscriptions();
    });
    refreshSubscriptions();
    setInterval(() => {
      if (subscriptionsOffered && !document.hidden) refreshSubscriptions();
    }, SUBSCRIPTIONS_REFRESH_MS);

    try {
      await loadSchemas();
    } catch (error) {
      showError("Could not load the schemas:", String(error.message || error));
      return;
    }
    const query = new URLSearchParams(window.location.search);
    const wanted = query.get("event_type");
    if (wanted && schemas[wanted]) eventTypeSelect.value = wanted;
    buildFields();
    formFromQuery(query);
    document.body.dataset.ready = "true";
    if (query.get("replay") === "1") start("replay");
    else if (query.get("watch") === "1") start("watch");
  }

  init();
})();
