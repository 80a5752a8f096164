# The trees an A/B script times, sourced by gemm_ab.sh and epochs_ab.sh. SIDES (default "before after"): "after" is
# this tree (AFTER_COMMIT), "before" the tree in .before (BEFORE_COMMIT), any other X the tree in .X (AFTER_COMMIT+X:
# this tree with a patch applied). Each side's tree is checked before anything runs, and gets data/ linked in.
SIDES=${SIDES:-"before after"}
root_of() {  # a side's tree
  case $1 in after) echo "$PWD" ;; *) echo "$PWD/.$1" ;; esac
}
commit_of() {  # the commit a side's results are recorded under
  case $1 in before) echo "$BEFORE_COMMIT" ;; after) echo "$AFTER_COMMIT" ;; *) echo "$AFTER_COMMIT+$1" ;; esac
}
for side in $SIDES; do
  if [ ! -d "$(root_of "$side")/perflab" ]; then
    echo "$(basename "$0"): side '$side' has no tree: $(root_of "$side")/perflab is missing (SIDES: \"after\", \"before\"" \
         "in .before, or X in .X, each made by git archive and a patch: experiments/half/README.md)" >&2
    exit 2
  fi
  [ "$side" = after ] || ln -sfn ../data "$(root_of "$side")/data"
done
