"""The interactive network view: both module trees side by side, each node coloured by its
verdict, collapsible, with search, filters by verdict and direction, a rank selector, "jump to
first divergence" and a detail panel per node. One HTML fragment (inline CSS and JS, the model
as JSON in a ``<script type="application/json">``), no network; several may sit in one page.

Trace names reach the page only through the JSON model and ``textContent``: nothing from a
trace is ever parsed as HTML. The model is :func:`netparity.report.tree.compare_tree`'s (or
any model of that shape: :func:`netparity.report.tree.numerics_tree`, ``perf_tree``).

Example:
    >>> from netparity.compare.results import CompareResult
    >>> from netparity.report.tree import compare_tree
    >>> frag = view_fragment(compare_tree(CompareResult()))
    >>> "npv-data" in frag and "</script>" in frag
    True
"""

from __future__ import annotations

import html
import itertools
import json
from typing import Any

_IDS = itertools.count()

VIEW_CSS = """
.npv{border:1px solid #ccc;border-radius:6px;margin:.6em 0;font-size:.9em}
.npv-bar{display:flex;flex-wrap:wrap;gap:.6em;align-items:center;padding:.5em;background:#f6f6f6;
border-bottom:1px solid #ddd}
.npv-bar label{white-space:nowrap} .npv-bar input[type=search]{width:16em}
.npv-strip{display:flex;flex-wrap:wrap;gap:4px;padding:.3em .5em;border-bottom:1px solid #eee}
.npv-chip{padding:1px 6px;border-radius:4px;cursor:pointer;font-family:monospace;color:#fff}
.npv-main{display:flex;min-height:12em;max-height:38em}
.npv-tree{flex:3;overflow:auto;border-right:1px solid #ddd}
.npv-detail{flex:2;overflow:auto;padding:.5em .8em}
.npv-head,.npv-row{display:grid;grid-template-columns:1fr 1fr 7.5em;gap:.5em;padding:1px .5em}
.npv-head{font-weight:bold;background:#fafafa;position:sticky;top:0;border-bottom:1px solid #ddd}
.npv-row{cursor:pointer;font-family:monospace;white-space:nowrap}
.npv-row:hover{background:#f0f4ff} .npv-row.sel{outline:2px solid #1565c0}
.npv-name{overflow:hidden;text-overflow:ellipsis}
.npv-caret{display:inline-block;width:1.1em;color:#555}
.npv-dot{display:inline-block;width:.75em;height:.75em;border-radius:50%;margin-right:.35em;
vertical-align:middle}
.npv-d{display:inline-block;width:1.6em;text-align:center;border-radius:3px;margin-right:2px;
color:#fff;font-size:.85em}
.c-pass{background:#2e7d32}.c-noise{background:#9e9d24}.c-propagated{background:#ef6c00}
.c-introduced{background:#c62828}.c-nonfinite{background:#6a1b9a}.c-unmatched{background:#546e7a}
.c-none{background:#ddd;color:#555}
.npv-row.c-bg-introduced{background:#ffebee}.npv-row.c-bg-nonfinite{background:#f3e5f5}
.npv-row.c-bg-unmatched{background:#eceff1}
.npv-detail table{font-size:.85em;margin:.3em 0} .npv-detail h4{margin:.4em 0}
.npv-legend span{margin-right:.6em}
"""

VIEW_JS = r"""
(function(){
function el(t,c,x){var e=document.createElement(t);if(c)e.className=c;if(x!=null)e.textContent=x;return e;}
var SEV={pass:0,none:0,noise:1,unmatched:2,propagated:3,introduced:4,nonfinite:5};
function cls(n,rank,dir){
  if(n.match==='ref'||n.match==='cand')return 'unmatched';
  var R=n.r[rank]||{},best='none',ds=dir==='all'?Object.keys(R):[dir];
  for(var k=0;k<ds.length;k++){var e=R[ds[k]];if(!e)continue;var c;
    if(e.nf)c='nonfinite';else if(e.s==='fail')c=(e.o==='introduced'?'introduced':'propagated');
    else if(e.s==='warn'||e.cleared)c='noise';else c='pass';
    if(best==='none'||SEV[c]>SEV[best])best=c;}
  return best;}
function leaf(p,parent){return (parent&&parent!=='(root)'&&p.indexOf(parent+'.')===0)?p.slice(parent.length+1):p;}
function fmt(v){if(typeof v==='number'){if(v===0)return '0';var a=Math.abs(v);
  return (a>=1e4||a<1e-3)?v.toExponential(3):(Math.round(v*1e4)/1e4).toString();}
  if(Array.isArray(v))return '['+v.join(', ')+']';return String(v);}
function init(root){
  var M=JSON.parse(root.querySelector('.npv-data').textContent),N=M.nodes;
  var kids=N.map(function(){return [];});N.forEach(function(n){if(n.parent>=0)kids[n.parent].push(n.id);});
  var open=N.map(function(n){return n.depth<1;}),sel=null;
  var st={q:'',dir:'all',rank:M.ranks[0],show:{}};
  M.classes.concat(['unmatched','none']).forEach(function(c){st.show[c]=true;});
  var tree=root.querySelector('.npv-tree'),detail=root.querySelector('.npv-detail');
  var bar=root.querySelector('.npv-bar');
  var search=bar.querySelector('input[type=search]');
  search.oninput=function(){st.q=search.value.toLowerCase();draw();};
  bar.querySelector('.npv-dir').onchange=function(){st.dir=this.value;draw();};
  var rs=bar.querySelector('.npv-rank');
  M.ranks.forEach(function(r){var o=el('option','', 'rank '+r);o.value=r;rs.appendChild(o);});
  if(M.ranks.length<2)rs.style.display='none';
  rs.onchange=function(){st.rank=this.value;draw();if(sel!=null)show(sel);};
  Array.prototype.forEach.call(bar.querySelectorAll('.npv-f'),function(cb){
    cb.onchange=function(){st.show[cb.value]=cb.checked;if(cb.value==='unmatched')st.show.none=cb.checked||st.show.pass;draw();};});
  bar.querySelector('.npv-first').onclick=function(){jump();};
  bar.querySelector('.npv-open').onclick=function(){open=open.map(function(){return true;});draw();};
  bar.querySelector('.npv-close').onclick=function(){open=N.map(function(n){return n.depth<1;});draw();};
  if(!M.first)bar.querySelector('.npv-first').disabled=true;
  var strip=root.querySelector('.npv-strip');
  if(M.ranks.length>1){M.ranks.forEach(function(r){var s=M.summary[r]||{};
    var c=el('span','npv-chip c-'+(s.status==='fail'?'introduced':s.status==='warn'?'noise':'pass'),'rank '+r);
    c.title=(s.first?'first divergence: '+s.first:'agrees');c.onclick=function(){st.rank=r;rs.value=r;draw();};
    strip.appendChild(c);});}else strip.style.display='none';
  // the worst class below each node (a collapsed layer3 shows red when its child does)
  var below=[];
  function roll(){below=N.map(function(){return 'none';});
    for(var i=N.length-1;i>=0;i--){var c=cls(N[i],st.rank,st.dir),b=below[i];
      var w=SEV[c]>=SEV[b]?c:b;var p=N[i].parent;if(p>=0&&SEV[w]>SEV[below[p]])below[p]=w;}}
  function match(n){var c=cls(n,st.rank,st.dir);if(!st.show[c])return false;
    if(st.q&&(n.ref+' '+n.cand+' '+n.kind).toLowerCase().indexOf(st.q)<0)return false;return true;}
  function filtering(){if(st.q)return true;for(var k in st.show)if(!st.show[k])return true;return false;}
  function draw(){roll();var keep=null;
    if(filtering()){keep=N.map(function(){return false;});
      for(var i=N.length-1;i>=0;i--){if(match(N[i])){var j=i;while(j>=0&&!keep[j]){keep[j]=true;j=N[j].parent;}}}}
    var frag=document.createDocumentFragment(),head=el('div','npv-head');
    var cols=M.columns||['reference','candidate'];
    head.appendChild(el('span','',cols[0]));head.appendChild(el('span','',cols[1]));
    head.appendChild(el('span','','fwd bwd upd'));frag.appendChild(head);
    function walk(i){var n=N[i];if(keep&&!keep[i])return;
      var c=cls(n,st.rank,st.dir),row=el('div','npv-row c-bg-'+c);row.dataset.id=i;
      if(i===sel)row.className+=' sel';
      var a=el('span','npv-name');a.style.paddingLeft=(n.depth*14)+'px';
      var caret=el('span','npv-caret',kids[i].length?((open[i]||keep)?'\u25be':'\u25b8'):'');
      caret.onclick=function(ev){ev.stopPropagation();open[i]=!open[i];draw();};a.appendChild(caret);
      var shown=(kids[i].length&&!(open[i]||keep)&&SEV[below[i]]>SEV[c])?below[i]:c;
      a.appendChild(el('span','npv-dot c-'+shown));a.title=c+(shown!==c?' (inside: '+shown+')':'');
      var P=n.parent>=0?N[n.parent]:null;
      a.appendChild(document.createTextNode(n.ref?leaf(n.ref,P&&P.ref):'\u2014'));a.title=n.ref+' \u2014 '+a.title;
      row.appendChild(a);var b=el('span','npv-name',n.cand?leaf(n.cand,P&&P.cand):'\u2014');b.title=n.cand;
      row.appendChild(b);
      var d=el('span','');['forward','backward','update'].forEach(function(dr){
        var e=(n.r[st.rank]||{})[dr];var x=el('span','npv-d c-'+(e?cls(n,st.rank,dr):'none'),dr[0].toUpperCase());
        x.title=dr+(e?': '+e.s+(e.o?' ('+e.o+')':''):': not captured');d.appendChild(x);});
      row.appendChild(d);row.onclick=function(){sel=i;show(i);draw();};frag.appendChild(row);
      if(open[i]||keep)kids[i].forEach(walk);}
    walk(0);tree.textContent='';tree.appendChild(frag);}
  function show(i){var n=N[i];detail.textContent='';
    detail.appendChild(el('h4','',(n.ref||'\u2014')+'  \u2194  '+(n.cand||'\u2014')));
    var c=cls(n,st.rank,st.dir);var p=el('p','');p.appendChild(el('span','npv-d c-'+c,' '));
    p.appendChild(document.createTextNode(' '+((M.labels||{})[c]||c)+(n.kind?'  \u00b7  '+n.kind:'')+(n.type==='op'?'  (operator)':'')
      +(n.match==='ref'?'  \u00b7  only in the reference':n.match==='cand'?'  \u00b7  only in the candidate':'')));
    detail.appendChild(p);
    var R=n.r[st.rank]||{};
    ['forward','backward','update'].forEach(function(dr){var e=R[dr];if(!e)return;
      var cmp=(M.kind||'compare')==='compare',lab=M.labels||{},dc=cls(n,st.rank,dr);
      detail.appendChild(el('h4','',dr+': '+(cmp?e.s+(e.o?' \u2014 '+e.o+' here':'')+(e.cleared?' \u2014 within noise (replay)':'')
        :(lab[dc]||dc))));
      var t=el('table','');function row(k,v){if(v==null||v==='')return;var r=el('tr','');r.appendChild(el('td','',k));
        r.appendChild(el('td','n',fmt(v)));t.appendChild(r);}
      if(cmp){row('output error (normwise)',e.e);row('input error',e.i);row('steps differing',e.steps&&e.steps.length?e.steps:null);
        row('calls',e.n);}else if(M.kind!=='perf')row('steps',e.steps&&e.steps.length?e.steps:null);
      row('parameter',e.param);row('source',e.src);row('candidate source',e.csrc);row(cmp?'judged by':'what',e.note);
      var rp=e.replay||{};if(rp.verdict){row('replay',rp.verdict);row('replay: local error',rp.local);
        row('replay: noise',rp.noise);row('replay: bound',rp.bound);row('replay: why',rp.reason);}
      var m=e.m||{};for(var k in m)row(k,m[k]);detail.appendChild(t);});
    if(!Object.keys(R).length)detail.appendChild(el('p','muted','nothing captured here on rank '+st.rank+(kids[i].length?': see its children':'')));}
  function jump(){var f=M.first;if(!f)return;st.rank=f.rank;rs.value=f.rank;
    var j=N[f.id].parent;while(j>=0){open[j]=true;j=N[j].parent;}sel=f.id;draw();show(f.id);
    var r=tree.querySelector('.npv-row[data-id="'+f.id+'"]');if(r)r.scrollIntoView({block:'center'});}
  if(M.first){st.rank=M.first.rank;rs.value=M.first.rank;
    var j=N[M.first.id].parent;while(j>=0){open[j]=true;j=N[j].parent;}}
  draw();if(M.first){sel=M.first.id;show(sel);draw();}
  root.npv={jump:jump,model:M};}
function all(){Array.prototype.forEach.call(document.querySelectorAll('.npv'),function(r){if(!r.npv)init(r);});}
if(document.readyState==='loading')document.addEventListener('DOMContentLoaded',all);else all();
})();
"""

_FILTERS = (("pass", "pass"), ("noise", "noise"), ("propagated", "propagated"),
            ("introduced", "introduced"), ("unmatched", "unmatched"),
            ("nonfinite", "non-finite"))


def _json_for_script(model: Any) -> str:
    """JSON safe inside ``<script>``: no ``</`` or ``<!--`` can end or open anything."""
    from netparity.compare.results import _clean

    return (json.dumps(_clean(model), separators=(",", ":"), allow_nan=False)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def view_fragment(model: dict[str, Any], *, include_assets: bool = True) -> str:
    """The view of ``model`` as one HTML fragment (with its CSS and JS unless the page
    already has them: :data:`VIEW_CSS`, :data:`VIEW_JS`)."""
    vid = f"npv-{next(_IDS)}"
    labels = {**dict(_FILTERS), **(model.get("labels") or {})}
    filters = "".join(f"<label><input type='checkbox' class='npv-f' value='{v}' checked> "
                      f"<span class='npv-d c-{v}'>&nbsp;</span>{html.escape(labels[v])}</label>"
                      for v, _ in _FILTERS if labels[v] != "-")
    jump = html.escape(str(model.get("jump") or ("jump to first divergence" if model.get("first")
                                                 else "nothing differs")))
    parts = [f"<div class='npv' id='{vid}'>",
             "<div class='npv-bar'><input type='search' placeholder='search modules and ops'>",
             "<select class='npv-dir' title='direction'><option value='all'>all directions"
             "</option><option value='forward'>forward</option><option value='backward'>"
             "backward</option><option value='update'>update</option></select>",
             "<select class='npv-rank' title='rank'></select>",
             f"<button class='npv-first' type='button'>{jump}</button>",
             "<button class='npv-open' type='button'>expand all</button>",
             "<button class='npv-close' type='button'>collapse</button>",
             f"<span class='npv-legend'>{filters}</span></div>",
             "<div class='npv-strip'></div>",
             "<div class='npv-main'><div class='npv-tree'></div>"
             "<div class='npv-detail'><p class='muted'>click a module for its evidence</p></div>"
             "</div>",
             f"<script type='application/json' class='npv-data'>{_json_for_script(model)}"
             "</script></div>"]
    if include_assets:
        parts.insert(0, f"<style>{VIEW_CSS}</style>")
        parts.append(f"<script>{VIEW_JS}</script>")
    return "".join(parts)
