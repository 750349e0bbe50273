# SPDX-License-Identifier: GPL-2.0
#
# KUnit's KTAP output, as a guest's kernel log (dmesg.txt, each line behind
# its "[ seconds]" stamp) or a debugfs results file (tests/common/lib.sh's
# collect_kunit), summed up for tests/run-guest: riser's runs only (the
# documents whose suites are named riser_*; the kernel's own suites at boot
# are left out). riser's suites run each time the module loads, so a guest's
# log holds one document per load of riser.
#
#   awk -f tests/ktap.awk FILE
#
# prints, for each riser document D (1, 2, ... in the order of the file):
#
#   doc D PLAN SUITES            its own plan ("1..PLAN", "-" if none) and the
#                                number of suite results it reported
#   suite D NAME PLAN CASES PASS FAIL SKIP RESULT
#                                each suite: its plan ("-" if none), the cases
#                                that reported a result, how many passed,
#                                failed and were skipped, and the suite's own
#                                result ("ok", "not_ok", "skip", or "none"
#                                when its result line never came)
#   bad D NAME LINE              each case that failed or was skipped, as KTAP
#                                wrote it
#
# A case is a line indented once ("    ok N name"); the lines of a
# parameterised case's parameters, indented twice, are its detail.
function flush_suite() {
	if (suite != "" && riser)
		printf "suite %d %s %s %d %d %d %d %s\n", doc, suite, splan, cases, pass, fail, skip, sres
	suite = ""; splan = "-"; cases = pass = fail = skip = 0; sres = "none"
}
function flush_doc() {
	flush_suite()
	if (indoc && riser) {
		printf "doc %d %s %d\n", doc, dplan, nsuites
		for (i = 1; i <= nbad; i++) print bad[i]
	}
	indoc = 0; riser = 0; dplan = "-"; nsuites = 0; nbad = 0
}
BEGIN { doc = 0; flush_doc() }
{
	line = $0
	sub(/^\[ *[0-9]+\.[0-9]+\] /, "", line)
	sub(/\r$/, "", line)
}
line == "KTAP version 1" || line == "TAP version 14" {
	flush_doc()
	indoc = 1
	pending = 1	# riser's or not is known at the first suite
	next
}
!indoc { next }
line ~ /^1\.\.[0-9]+$/ { dplan = substr(line, 4); next }
line ~ /^    # Subtest: / {
	flush_suite()
	suite = substr(line, 16)
	if (pending) {
		pending = 0
		if (suite ~ /^riser_/) { riser = 1; doc++ }
	}
	next
}
suite != "" && line ~ /^    1\.\.[0-9]+$/ { splan = substr(line, 8); next }
suite != "" && line ~ /^    (not )?ok [0-9]+ / {
	cases++
	if (line ~ /^    ok / && line ~ /# SKIP/) { skip++; bad[++nbad] = "bad " doc " " suite " " substr(line, 5) }
	else if (line ~ /^    ok /) pass++
	else { fail++; bad[++nbad] = "bad " doc " " suite " " substr(line, 5) }
	next
}
line ~ /^(not )?ok [0-9]+ / {
	# the suite's own result line ends it
	if (line ~ /^ok / && line ~ /# SKIP/) sres = "skip"
	else if (line ~ /^ok /) sres = "ok"
	else sres = "not_ok"
	nsuites++
	flush_suite()
	next
}
END { flush_doc() }
