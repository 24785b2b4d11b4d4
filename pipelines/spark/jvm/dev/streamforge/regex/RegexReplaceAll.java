package dev.streamforge.regex;

import com.google.re2j.Matcher;
import org.apache.spark.sql.api.java.UDF3;

/**
 * {@code streamforge_regex_replace(text, pattern, template)}: DSL {@code STRING:REGEX_REPLACE}, every
 * match replaced as Rust's {@code Regex::replace_all} does: matches left to right without overlap, an
 * empty match right after the previous match skipped (RE2/J's own {@code Matcher.replaceAll} keeps it, as
 * {@code java.util.regex} does). NULL when an argument is NULL.
 *
 * <p>{@code template} is the canonical form {@code pipelines.dsl.spark} builds from the DSL's Rust-syntax
 * replacement: {@code $$} is a literal {@code $}, {@code ${n}} is group {@code n} (a group that did not
 * take part expands to nothing), every other character is itself.
 */
public final class RegexReplaceAll implements UDF3<String, String, String, String> {
  private static final long serialVersionUID = 1L;

  @Override
  public String call(String text, String regex, String template) {
    if (text == null || regex == null || template == null) {
      return null;
    }
    Matcher matcher = Patterns.compiled(regex).matcher(text);
    int length = text.length();
    StringBuilder out = null;
    int pos = 0;
    int lastEnd = -1;
    int from = 0;
    // The search position is ours, not Matcher.find()'s: after an empty match RE2/J moves on by one UTF-16
    // unit, which finds "matches" between the two halves of a surrogate pair; we move on by a code point.
    while (from <= length && matcher.find(from)) {
      int start = matcher.start();
      int end = matcher.end();
      from = end > start ? end : end + (end < length ? Character.charCount(text.codePointAt(end)) : 1);
      if (start == end && start == lastEnd) {
        continue;
      }
      if (out == null) {
        out = new StringBuilder(length + 16);
      }
      out.append(text, pos, start);
      expand(template, matcher, out);
      pos = end;
      lastEnd = end;
    }
    if (out == null) {
      return text;
    }
    out.append(text, pos, text.length());
    return out.toString();
  }

  private static void expand(String template, Matcher matcher, StringBuilder out) {
    int i = 0;
    int n = template.length();
    while (i < n) {
      char c = template.charAt(i);
      if (c == '$' && i + 1 < n && template.charAt(i + 1) == '$') {
        out.append('$');
        i += 2;
      } else if (c == '$' && i + 1 < n && template.charAt(i + 1) == '{') {
        int close = template.indexOf('}', i + 2);
        String group = matcher.group(Integer.parseInt(template.substring(i + 2, close)));
        if (group != null) {
          out.append(group);
        }
        i = close + 1;
      } else {
        out.append(c);
        i += 1;
      }
    }
  }
}
