// Typeset TeX into MathJax's CommonHTML at build time (called by _ext/relpos_book.py).
// stdin: {"es5": MathJax's es5 folder, "fontURL": the fonts' URL from the page,
//         "items": [{"tex": "...", "display": true|false}, ...]}
// stdout: {"html": [one <mjx-container> per item], "css": the stylesheet they need}
// A formula MathJax cannot read fails the call (exit status 1, the formula on stderr).
const fs = require("fs");
const input = JSON.parse(fs.readFileSync(0, "utf8"));
require(input.es5 + "/node-main.js").init({
  loader: {paths: {mathjax: input.es5}, load: ["adaptors/liteDOM", "input/tex", "output/chtml"]},
  tex: {packages: {"[+]": ["ams", "newcommand", "noundefined", "autoload", "configmacros"]},
        formatError: (jax, err) => { throw err; }},
  chtml: {fontURL: input.fontURL},
  startup: {typeset: false},
}).then((MathJax) => {
  const adaptor = MathJax.startup.adaptor;
  const html = [];
  for (const item of input.items) {
    try {
      html.push(adaptor.outerHTML(MathJax.tex2chtml(item.tex, {display: item.display})));
    } catch (err) {
      process.stderr.write(`cannot typeset ${JSON.stringify(item.tex)}: ${err.message}\n`);
      process.exit(1);
    }
  }
  const css = adaptor.textContent(MathJax.chtmlStylesheet());
  process.stdout.write(JSON.stringify({html, css}));
}).catch((err) => { process.stderr.write(String(err && err.stack || err) + "\n"); process.exit(1); });
