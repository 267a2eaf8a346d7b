// The matrix's filters: by host (columns), outcome and tag (rows). No library, no network.
(function () {
  "use strict";
  var form = document.getElementById("filters");
  var table = document.getElementById("matrix");
  if (!form || !table) { return; }
  var shown = document.getElementById("shown");
  function checked(name) {
    return Array.prototype.filter.call(form.elements[name] ? form.querySelectorAll("input[name=" + name + "]") : [],
      function (box) { return box.checked; }).map(function (box) { return box.value; });
  }
  function apply() {
    var hosts = checked("host"), outcomes = checked("outcome"), tag = form.elements.tag.value;
    table.querySelectorAll("[data-host]").forEach(function (cell) {
      cell.classList.toggle("hidden", hosts.indexOf(cell.getAttribute("data-host")) < 0);
    });
    var rows = table.tBodies[0].rows, visible = 0;
    for (var i = 0; i < rows.length; i++) {
      var row = rows[i];
      var tagged = !tag || (" " + row.getAttribute("data-tags") + " ").indexOf(" " + tag + " ") >= 0;
      var any = false;
      row.querySelectorAll("td[data-outcome]").forEach(function (cell) {
        if (!cell.classList.contains("hidden") && outcomes.indexOf(cell.getAttribute("data-outcome")) >= 0) { any = true; }
      });
      row.classList.toggle("hidden", !(tagged && any));
      if (tagged && any) { visible++; }
    }
    shown.textContent = visible + " of " + rows.length + " cases shown";
  }
  form.addEventListener("change", apply);
  apply();
  document.documentElement.setAttribute("data-ready", "1");
}());
