/* graphdiag report: figures are drawn when they become visible (a folded run is drawn
   when opened: plotly measures a hidden div as 0 px wide), links to a folded run open
   it, and the copy button works. Data comes from <script type="application/json">
   blocks (parsed, never evaluated; a large one gzip-packed and inflated here). */
(function () {
  "use strict";
  var config = { displaylogo: false, responsive: true,
                 modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"] };
  var specs = {};
  var blocks = document.querySelectorAll("script.gd-figure");
  for (var i = 0; i < blocks.length; i++) { specs[blocks[i].getAttribute("data-target")] = blocks[i]; }
  function draw(root) {
    var divs = root.querySelectorAll("div.plot:not([data-drawn])");
    for (var k = 0; k < divs.length; k++) {
      var target = divs[k], block = specs[target.id];
      if (!block || typeof Plotly === "undefined" || target.offsetParent === null) { continue; }
      target.setAttribute("data-drawn", "1");
      figure(block).then(function (el) {
        return function (spec) { el.textContent = ""; return Plotly.newPlot(el, spec.data, spec.layout, config); };
      }(target)).catch(function (el) {
        return function (err) { el.textContent = "This plot could not be drawn: " + err; };
      }(target));
    }
  }
  /* a large figure is packed as {"gzip": base64} (render/html_page.figure_block) */
  function figure(block) {
    try {
      var spec = JSON.parse(block.textContent);
      if (!spec.gzip) { return Promise.resolve(spec); }
      var raw = atob(spec.gzip), bytes = new Uint8Array(raw.length);
      for (var b = 0; b < raw.length; b++) { bytes[b] = raw.charCodeAt(b); }
      var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      return new Response(stream).text().then(JSON.parse);
    } catch (err) {
      return Promise.reject(err);
    }
  }
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id && document.getElementById(id);
    for (var p = el; p; p = p.parentElement) { if (p.tagName === "DETAILS") { p.open = true; } }
    if (el) { el.scrollIntoView(); }
  }
  var folds = document.querySelectorAll("details");
  for (var d = 0; d < folds.length; d++) {
    folds[d].addEventListener("toggle", function (ev) { if (ev.target.open) { draw(ev.target); } });
  }
  window.addEventListener("hashchange", openTarget);
  if (location.hash) { openTarget(); }
  draw(document);
  var buttons = document.querySelectorAll("button.copy");
  for (var j = 0; j < buttons.length; j++) {
    (function (button) {
      var source = document.getElementById(button.getAttribute("data-copy"));
      if (!source) { return; }
      button.hidden = false;
      button.addEventListener("click", function () {
        var text = source.textContent;
        var done = function () { button.textContent = "Copied"; setTimeout(function () { button.textContent = "Copy"; }, 1500); };
        if (navigator.clipboard && navigator.clipboard.writeText) {
          navigator.clipboard.writeText(text).then(done, function () { fallback(text); done(); });
        } else { fallback(text); done(); }
      });
    })(buttons[j]);
  }
  function fallback(text) {
    var area = document.createElement("textarea");
    area.value = text; area.setAttribute("readonly", ""); area.style.position = "fixed"; area.style.opacity = "0";
    document.body.appendChild(area); area.select();
    try { document.execCommand("copy"); } catch (e) { /* nothing else to try */ }
    document.body.removeChild(area);
  }
})();
