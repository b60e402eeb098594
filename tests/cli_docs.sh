#!/usr/bin/env bash
# cli_docs.sh - every option the built dptrain shows is documented in
# exactly one page of docs/, under the convention of docs/README.md: a line
# "- `COMMAND --option ...`" (COMMAND: the command that takes it, `dptrain`
# for an option of dptrain itself). The options are read from the help
# texts, not listed here, so an option added to a command's help fails this
# test until a page documents it:
# - `dptrain --help` names the commands; each command's `--help` lists its
#   options, one per line starting with two spaces and `--` (the first
#   column, up to a gap of two spaces, may name several: `--beta1 X,
#   --beta2 X`); `--help` itself is taken by every command and not listed;
# - each (command, option) has a documenting line in exactly one page;
# - no page documents an option that no help shows (a renamed or removed
#   option).
# DOCS_DIR=DIR checks another copy of docs/ (the mutation check).
source "$(dirname "$0")/testing.sh"
docs=${DOCS_DIR:-$(cd "$(dirname "$0")/../docs" && pwd)}

# options_of TEXT: the options of a help text's option lines
options_of() {
  sed -n 's/^  \(--[a-z0-9].*\)$/\1/p' <<<"$1" | sed -E 's/ {2,}.*//' | grep -oE -- '--[a-z0-9][a-z0-9-]*' | grep -vx -- '--help'
}

top=$("$bin" --help 2>&1)
[[ $? -eq 0 && $top == *"commands:"* ]] && pass || fail "dptrain --help: $(head -2 <<<"$top")"
commands=$(sed -n '/^commands:/,/^$/p' <<<"$top" | sed -nE 's/^  ([a-z]+) .*/\1/p' | grep -vx help)
[[ $(wc -w <<<"$commands") -ge 6 ]] && pass || fail "fewer than 6 commands in dptrain --help: $commands"
: >"$tmp/shown"
for option in $(options_of "$top"); do echo "dptrain $option" >>"$tmp/shown"; done
for command in $commands; do
  text=$("$bin" "$command" --help 2>&1)
  for option in $(options_of "$text"); do echo "$command $option" >>"$tmp/shown"; done
done
sort -u -o "$tmp/shown" "$tmp/shown"
[[ $(grep -c '^train ' "$tmp/shown") -ge 30 ]] && pass || fail "fewer than 30 train options read from its help"

# documented: "PAGE<TAB>COMMAND --option" for every documenting line
for page in "$docs"/*.md; do
  sed -nE 's/^- `([a-z]+) (--[a-z0-9][a-z0-9-]*)[ `].*/\1 \2/p' "$page" | sed "s|^|$(basename "$page")\t|"
done | sort >"$tmp/documented"

# one awk over both lists: "ok", "none COMMAND OPTION", "many COMMAND OPTION PAGES", "stale COMMAND OPTION"
awk -F'\t' 'NR == FNR { if (!seen[$2 FS $1]++) { pages[$2] = pages[$2] " " $1; n[$2]++ } next }
  { shown[$0] = 1; if (n[$0] == 1) print "ok"; else if (!n[$0]) print "none\t" $0; else print "many\t" $0 "\t" pages[$0] }
  END { for (o in n) if (!(o in shown)) print "stale\t" o }' "$tmp/documented" "$tmp/shown" >"$tmp/verdicts"
while IFS=$'\t' read -r verdict what pages; do
  case $verdict in
    ok) pass ;;
    none) fail "$what: shown by dptrain ${what%% *} --help, documented in no page of docs/ (a line '- \`$what ...\`: ...')" ;;
    many) fail "$what: documented in more than one page:$pages" ;;
    stale) fail "$what: documented in docs/, but shown by no help" ;;
  esac
done <"$tmp/verdicts"
echo "cli_docs: $(wc -l <"$tmp/shown") options shown, $(wc -l <"$tmp/documented") documenting lines"
testing_finish cli_docs
