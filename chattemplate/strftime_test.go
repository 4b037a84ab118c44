package chattemplate

import (
	"testing"
	"time"
)

// TestStrftime_MatchesPythonOnLinux compares every directive strftime
// knows with Python 3.11's datetime.strftime on glibc (outputs recorded
// from it), on a date in ISO week 53 of the previous year and one in week
// 1 of the next.
func TestStrftime_MatchesPythonOnLinux(t *testing.T) {
	const format = "%a|%A|%b|%B|%h|%c|%C|%d|%D|%e|%F|%g|%G|%H|%I|%j|%k|%l|%m|%M|%n|%p|%r|%R|%S|%t|%T|%u|%U|%V|%w|%W|%x|%X|%y|%Y|%%|%-m/%-d %-H:%-M|%q|%-q"
	cases := []struct {
		at   time.Time
		want string
	}{
		{time.Date(2027, 1, 1, 0, 7, 9, 0, time.UTC),
			"Fri|Friday|Jan|January|Jan|Fri Jan  1 00:07:09 2027|20|01|01/01/27| 1|2027-01-01|26|2026|00|12|001| 0|12|01|07|\n|AM|12:07:09 AM|00:07|09|\t|00:07:09|5|00|53|5|00|01/01/27|00:07:09|27|2027|%|1/1 0:7|%q|%-q"},
		{time.Date(2024, 12, 30, 23, 59, 1, 5e6, time.UTC),
			"Mon|Monday|Dec|December|Dec|Mon Dec 30 23:59:01 2024|20|30|12/30/24|30|2024-12-30|25|2025|23|11|365|23|11|12|59|\n|PM|11:59:01 PM|23:59|01|\t|23:59:01|1|52|01|1|53|12/30/24|23:59:01|24|2024|%|12/30 23:59|%q|%-q"},
	}
	for _, c := range cases {
		if got := strftime(format, c.at); got != c.want {
			t.Errorf("%v:\n got %q\nwant %q", c.at, got, c.want)
		}
	}
}
