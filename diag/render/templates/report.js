/* graphdiag report: draw the embedded figures and wire the copy button. Data comes from
   <script type="application/json"> blocks (parsed, never evaluated). */
(function () {
  "use strict";
  var config = { displaylogo: false, responsive: true,
                 modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"] };
  var blocks = document.querySelectorAll("script.gd-figure");
  for (var i = 0; i < blocks.length; i++) {
    var target = document.getElementById(blocks[i].getAttribute("data-target"));
    if (!target || typeof Plotly === "undefined") { continue; }
    try {
      var spec = JSON.parse(blocks[i].textContent);
      target.textContent = "";
      Plotly.newPlot(target, spec.data, spec.layout, config);
    } catch (err) {
      target.textContent = "This plot could not be drawn: " + err;
    }
  }
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
