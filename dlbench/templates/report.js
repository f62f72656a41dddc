// The report's one script (no network, no library): sort a .sortable table by a click on a
// column heading (numbers as numbers), and filter a long table's rows by the text typed above it.
(function () {
  function key(cell) {
    var text = cell ? cell.textContent.trim() : "";
    var number = parseFloat(text.replace(/[^0-9.eE+-]/g, ""));
    return /^[-+]?[0-9]/.test(text) && !isNaN(number) ? number : text.toLowerCase();
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (th, column) {
      th.classList.add("sorts");
      th.title = "sort by this column";
      th.addEventListener("click", function () {
        var body = table.tBodies[0];
        var up = th.dataset.order !== "up";
        table.querySelectorAll("thead th").forEach(function (h) { delete h.dataset.order; });
        th.dataset.order = up ? "up" : "down";
        Array.from(body.rows)
          .sort(function (a, b) {
            var x = key(a.cells[column]), y = key(b.cells[column]);
            var order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : typeof x === "number" ? -1 : 1;
            return up ? order : -order;
          })
          .forEach(function (row) { body.appendChild(row); });
      });
    });
  });
  document.querySelectorAll("input[data-filter]").forEach(function (input) {
    var table = document.getElementById(input.dataset.filter);
    var count = document.querySelector('[data-count="' + input.dataset.filter + '"]');
    input.addEventListener("input", function () {
      var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      var shown = 0;
      Array.from(table.tBodies[0].rows).forEach(function (row) {
        var text = row.textContent.toLowerCase();
        var keep = words.every(function (w) { return text.indexOf(w) >= 0; });
        row.hidden = !keep;
        shown += keep ? 1 : 0;
      });
      count.textContent = words.length ? shown + " of " + table.tBodies[0].rows.length + " rows" : "";
    });
  });
})();
