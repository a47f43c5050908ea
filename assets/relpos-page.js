/* Tables that are wider than the column after wrapping: mark their scroll box (a fade at
   the right edge, a sticky first column: assets/relpos.css) and say that they scroll.
   Re-checked when the window changes size. */
(function () {
  function mark() {
    document.querySelectorAll(".pst-scrollable-table-container").forEach(function (box) {
      var scrolls = box.scrollWidth > box.clientWidth + 1;
      box.classList.toggle("relpos-scrolls", scrolls);
      var hint = box.previousElementSibling;
      var has = hint && hint.classList.contains("relpos-scroll-hint");
      if (scrolls && !has) {
        hint = document.createElement("span");
        hint.className = "relpos-scroll-hint";
        hint.textContent = "scroll the table sideways \u2192";
        box.parentNode.insertBefore(hint, box);
      } else if (!scrolls && has) {
        hint.remove();
      }
      box.classList.toggle("relpos-scrolled-end", scrolls && box.scrollLeft + box.clientWidth >= box.scrollWidth - 1);
      if (!box._relposListening) {
        box._relposListening = true;
        box.addEventListener("scroll", function () {
          box.classList.toggle("relpos-scrolled-end", box.scrollLeft + box.clientWidth >= box.scrollWidth - 1);
        }, {passive: true});
      }
    });
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", mark); } else { mark(); }
  window.addEventListener("resize", mark);
})();
