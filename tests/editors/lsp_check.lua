-- Headless Neovim 0.7 check for tests/editors/test_neovim.py: the plain built-in LSP client
-- (vim.lsp.start_client, as in the README's setup snippet) attached to `vramlens serve`.
-- Reads its job from $VRAMLENS_NVIM_CONFIG (JSON: file, out, cmd, settings, hover_line, fix_pattern,
-- diagnostic_config),
-- writes what the client saw (diagnostics, hover, the GPUs ranked for the buffer, code actions) to `out`
-- as JSON and quits.
local config = vim.fn.json_decode(vim.fn.readfile(os.getenv('VRAMLENS_NVIM_CONFIG')))
local out = { estimates = {} }

local function finish()
  vim.fn.writefile({ vim.fn.json_encode(out) }, config.out)
  vim.cmd('qa!')
end

local function diagnostics(bufnr)
  return vim.tbl_map(function(d)
    return { lnum = d.lnum, col = d.col, message = d.message, source = d.source, code = d.code, severity = d.severity }
  end, vim.diagnostic.get(bufnr))
end

local function has_code(bufnr, code)
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    if d.code == code then return true end
  end
  return false
end

local ok, err = pcall(function()
  -- the diagnostic settings of the README's snippet (the test passes its `vim.diagnostic.config(...)` line)
  if config.diagnostic_config then assert(loadstring(config.diagnostic_config))() end
  vim.cmd('filetype on')
  vim.cmd('edit ' .. vim.fn.fnameescape(config.file))
  local bufnr = vim.api.nvim_get_current_buf()
  out.filetype = vim.bo[bufnr].filetype

  local client_id = vim.lsp.start_client({
    name = 'vramlens',
    cmd = config.cmd,
    root_dir = vim.fn.fnamemodify(config.file, ':h'),
    settings = config.settings,
    -- Neovim 0.7 does not announce workspace/configuration: push the settings once started.
    on_init = function(client)
      client.notify('workspace/didChangeConfiguration', { settings = client.config.settings })
    end,
    handlers = {
      ['vramlens/estimate'] = function(_, result) table.insert(out.estimates, result) end,
    },
  })
  vim.lsp.buf_attach_client(bufnr, client_id)
  local client = vim.lsp.get_client_by_id(client_id)

  out.diagnostics_ok = vim.wait(60000, function() return has_code(bufnr, 'VL001') end, 50)
  out.diagnostics = diagnostics(bufnr)
  vim.wait(200, function() return false end) -- the estimate notification follows the diagnostics
  out.estimate_before_fix = out.estimates[#out.estimates] or vim.NIL

  local uri = vim.uri_from_bufnr(bufnr)
  -- Which GPU? The README's way to ask: every catalog GPU with this buffer's peak and tokens/s.
  local gpus = vim.lsp.buf_request_sync(bufnr, 'workspace/executeCommand',
    { command = 'vramlens.listGpus', arguments = { uri } }, 15000)
  out.gpus = gpus and gpus[client_id] and gpus[client_id].result or vim.NIL

  local function hover(line)
    local text = vim.api.nvim_buf_get_lines(bufnr, line, line + 1, false)[1] or ''
    local params = { textDocument = { uri = uri }, position = { line = line, character = #text:match('^%s*') } }
    local res = vim.lsp.buf_request_sync(bufnr, 'textDocument/hover', params, 10000)
    local r = res and res[client_id] and res[client_id].result
    return r and r.contents and (r.contents.value or r.contents) or vim.NIL
  end
  out.hover_model = hover(config.hover_line)

  local error_line
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    if d.code == 'VL001' then error_line = d.lnum break end
  end
  -- the signs on the error's line, in the order Neovim shows them (the first one is in the sign column)
  out.signs_on_error_line = {}
  for _, placed in ipairs(vim.fn.sign_getplaced(bufnr, { group = '*', lnum = (error_line or 0) + 1 })) do
    for _, sign in ipairs(placed.signs) do
      table.insert(out.signs_on_error_line, { name = sign.name, priority = sign.priority })
    end
  end
  local line_diags = vim.lsp.diagnostic.get_line_diagnostics(bufnr, error_line or 0)
  local function code_actions(only)
    local res = vim.lsp.buf_request_sync(bufnr, 'textDocument/codeAction', {
      textDocument = { uri = uri },
      range = { start = { line = error_line or 0, character = 0 }, ['end'] = { line = error_line or 0, character = 0 } },
      context = { diagnostics = line_diags, only = only },
    }, 15000)
    local actions = {}
    for _, r in pairs(res or {}) do
      for _, a in ipairs(r.result or {}) do table.insert(actions, a) end
    end
    return actions
  end
  local actions = code_actions({ 'quickfix' })
  vim.list_extend(actions, code_actions({ 'source' }))
  out.code_actions = vim.tbl_map(function(a) return { title = a.title, kind = a.kind } end, actions)

  -- Apply the first action whose title matches, as the code-action menu would.
  local before = table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), '\n')
  for _, a in ipairs(actions) do
    if vim.fn.match(a.title, config.fix_pattern) >= 0 then
      out.applied = a.title
      if a.edit then vim.lsp.util.apply_workspace_edit(a.edit, client.offset_encoding) end
      local cmd = type(a.command) == 'table' and a.command or nil
      if cmd then
        vim.lsp.buf_request_sync(bufnr, 'workspace/executeCommand', { command = cmd.command, arguments = cmd.arguments }, 15000)
      end
      break
    end
  end
  out.text_changed = before ~= table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), '\n')
  if out.applied then
    out.cleared_after_fix = vim.wait(20000, function() return not has_code(bufnr, 'VL001') end, 50)
    vim.wait(500, function() return false end) -- a late publish for an older version would land here
    out.diagnostics_after_fix = diagnostics(bufnr)
  end

  vim.lsp.stop_client(client_id)
  out.stopped = vim.wait(5000, function() return vim.lsp.get_client_by_id(client_id) == nil end, 50)
end)
if not ok then out.error = tostring(err) end
finish()
